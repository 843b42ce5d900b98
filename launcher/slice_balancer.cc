// SliceBalancer: see slice_balancer.h.
#include "launcher/slice_balancer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace een {

std::vector<uint32_t> ProportionalShares(const std::vector<double>& weights, uint32_t total) {
  const size_t n = weights.size();
  std::vector<uint32_t> shares(n, 1);
  if (n == 0 || total < n) return shares;
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  // Each worker's one sample first, the rest in proportion.
  const uint32_t rest = total - static_cast<uint32_t>(n);
  std::vector<double> remainder(n);
  uint32_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double ideal = rest * weights[i] / sum;
    const uint32_t whole = static_cast<uint32_t>(std::min<double>(std::floor(ideal), rest - given));
    shares[i] += whole;
    given += whole;
    remainder[i] = ideal - whole;
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t k = 0; given < rest; k = (k + 1) % n, ++given) shares[order[k]]++;
  return shares;
}

void SliceBalancer::Observe(int rank, uint64_t step, uint64_t compute_micros, uint32_t samples,
                            uint32_t global_batch) {
  // What DataParallel::batch_slice() can give (a global batch of at most
  // 2^31 samples, a slice of it); anything else is not a measurement.
  if (samples == 0 || samples > global_batch || global_batch > (uint32_t{1} << 31) ||
      compute_micros == 0) {
    return;
  }
  Measure& m = measures_[rank];
  if (step <= m.step) return;  // this step was seen (heartbeats outpace steps)
  m.step = step;
  m.global_batch = global_batch;
  const double per_sample = static_cast<double>(compute_micros) / samples;
  m.micros_per_sample =
      m.micros_per_sample == 0
          ? per_sample
          : options_.smoothing * per_sample + (1 - options_.smoothing) * m.micros_per_sample;
  m.since_change++;
}

std::optional<std::vector<uint32_t>> SliceBalancer::Propose(
    const std::vector<int>& live, const std::vector<uint32_t>& current) const {
  if (live.size() < 2) return std::nullopt;
  uint32_t batch = 0;
  std::vector<double> per_sample, speed;
  for (int rank : live) {
    auto it = measures_.find(rank);
    if (it == measures_.end() || it->second.since_change < options_.settle) return std::nullopt;
    if (batch != 0 && it->second.global_batch != batch) return std::nullopt;  // mid-change
    batch = it->second.global_batch;
    per_sample.push_back(it->second.micros_per_sample);
    speed.push_back(1.0 / it->second.micros_per_sample);
  }
  if (batch < live.size()) return std::nullopt;
  std::vector<uint32_t> now = current;
  if (now.size() != live.size()) now.assign(live.size(), batch / live.size());
  const std::vector<uint32_t> proposed = ProportionalShares(speed, batch);
  if (proposed == now) return std::nullopt;
  auto slowest = [&](const std::vector<uint32_t>& shares) {
    double worst = 0;
    for (size_t i = 0; i < shares.size(); ++i) worst = std::max(worst, shares[i] * per_sample[i]);
    return worst;
  };
  if (slowest(proposed) > (1 - options_.min_gain) * slowest(now)) return std::nullopt;
  return proposed;
}

void SliceBalancer::Changed() {
  for (auto& [rank, m] : measures_) m.since_change = 0;
}

std::string SliceBalancer::Describe(const std::vector<int>& live) const {
  std::string out;
  for (int rank : live) {
    auto it = measures_.find(rank);
    if (it == measures_.end() || it->second.micros_per_sample <= 0) continue;
    out += fmt::format("{}worker {} {:.0f} samples/s", out.empty() ? "" : ", ", rank,
                       1e6 / it->second.micros_per_sample);
  }
  return out;
}

}  // namespace een
