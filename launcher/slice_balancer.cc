// SliceBalancer: see slice_balancer.h.
#include "launcher/slice_balancer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace een {

std::vector<uint32_t> ProportionalShares(const std::vector<double>& weights, uint32_t total) {
  const size_t n = weights.size();
  std::vector<uint32_t> shares(n, 1);
  if (n == 0 || total < n) return shares;
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  uint64_t given = 0;
  for (size_t i = 0; i < n; ++i) {  // at most the ideal, at least one
    shares[i] = std::max<uint32_t>(1, static_cast<uint32_t>(std::floor(total * weights[i] / sum)));
    given += shares[i];
  }
  // Worker i's time is shares[i] / weights[i]: the ones at least 1 made
  // too many are taken from the longest, the rest go one by one where they
  // lengthen the longest least.
  auto time = [&](size_t i, uint32_t samples) { return samples / weights[i]; };
  for (; given > total; --given) {
    size_t longest = n;
    for (size_t i = 0; i < n; ++i) {
      if (shares[i] > 1 && (longest == n || time(i, shares[i]) > time(longest, shares[longest]))) {
        longest = i;
      }
    }
    shares[longest]--;
  }
  for (; given < total; ++given) {
    size_t least = 0;
    for (size_t i = 1; i < n; ++i) {
      if (time(i, shares[i] + 1) < time(least, shares[least] + 1)) least = i;
    }
    shares[least]++;
  }
  return shares;
}

void SliceBalancer::Observe(int rank, uint64_t step, uint64_t compute_micros, uint32_t samples,
                            uint32_t global_batch) {
  Measure& m = measures_[rank];
  if (step <= m.step) return;  // this step was seen (heartbeats outpace steps)
  m.step = step;
  // What DataParallel::batch_slice() can give (a global batch of at most
  // 2^31 samples, a slice of it); anything else is not a measurement.
  if (samples == 0 || samples > global_batch || global_batch > (uint32_t{1} << 31) ||
      compute_micros == 0) {
    return;
  }
  m.global_batch = global_batch;
  const double compute = static_cast<double>(compute_micros);
  if (samples != m.samples) {  // a new share: a new average, the old one kept if it settled
    if (m.count >= options_.settle) {
      m.old_samples = m.samples;
      m.old_compute = m.compute;
    }
    m.samples = samples;
    m.compute = compute;
    m.count = 1;
  } else {
    m.compute = options_.smoothing * compute + (1 - options_.smoothing) * m.compute;
    m.count++;
  }
  m.since_change++;
  if (m.count == options_.settle && m.old_samples != 0) EstimateFixed();
}

void SliceBalancer::EstimateFixed() {
  std::vector<double> intercepts;
  double smallest = 0;
  for (const auto& [rank, m] : measures_) {
    if (m.count < options_.settle) continue;
    smallest = smallest == 0 ? m.compute : std::min(smallest, m.compute);
    // A line through two shares a few samples apart is mostly noise: only
    // a share that changed by a quarter or more gives an intercept.
    const uint32_t change =
        m.samples > m.old_samples ? m.samples - m.old_samples : m.old_samples - m.samples;
    if (m.old_samples == 0 || 4 * uint64_t{change} < std::max(m.samples, m.old_samples)) continue;
    const double slope = (m.compute - m.old_compute) /
                         (static_cast<double>(m.samples) - static_cast<double>(m.old_samples));
    if (slope <= 0) continue;  // noise, or its speed changed with its share
    intercepts.push_back(m.compute - slope * m.samples);
  }
  if (intercepts.empty()) return;
  std::nth_element(intercepts.begin(), intercepts.begin() + intercepts.size() / 2,
                   intercepts.end());
  const double median = std::clamp(intercepts[intercepts.size() / 2], 0.0, 0.95 * smallest);
  fixed_ = fixed_ == 0 ? median : 0.5 * fixed_ + 0.5 * median;
}

double SliceBalancer::Marginal(const Measure& m) const {
  const double fixed = std::min(fixed_, 0.95 * m.compute);
  return (m.compute - fixed) / m.samples;
}

std::optional<std::vector<uint32_t>> SliceBalancer::Propose(const std::vector<int>& live,
                                                            const std::vector<uint32_t>& current) {
  if (live.size() < 2) return std::nullopt;
  uint32_t batch = 0;
  std::vector<double> per_sample, speed;
  for (int rank : live) {
    auto it = measures_.find(rank);
    if (it == measures_.end()) return std::nullopt;
    const Measure& m = it->second;
    if (m.since_change < options_.settle || m.count < options_.settle) return std::nullopt;
    if (batch != 0 && m.global_batch != batch) return std::nullopt;  // mid-change, or misuse
    batch = m.global_batch;
    per_sample.push_back(Marginal(m));
    speed.push_back(1.0 / per_sample.back());
  }
  if (batch < live.size()) return std::nullopt;
  std::vector<uint32_t> now = current;
  if (now.size() != live.size()) now.assign(live.size(), batch / live.size());
  const std::vector<uint32_t> proposed = ProportionalShares(speed, batch);
  if (proposed == now) return std::nullopt;
  auto slowest = [&](const std::vector<uint32_t>& shares) {
    double worst = 0;
    for (size_t i = 0; i < shares.size(); ++i) worst = std::max(worst, shares[i] * per_sample[i]);
    return fixed_ + worst;
  };
  const double gain = 1 - slowest(proposed) / slowest(now);
  if (gain < (may_refine_ ? options_.refine_gain : options_.min_gain)) return std::nullopt;
  proposed_large_ = gain >= options_.min_gain;
  return proposed;
}

void SliceBalancer::Changed() {
  may_refine_ = proposed_large_;  // not after a refinement, nor new live workers' equal shares
  proposed_large_ = false;
  for (auto& [rank, m] : measures_) m.since_change = 0;
}

std::optional<double> SliceBalancer::MicrosPerSample(int rank) const {
  auto it = measures_.find(rank);
  if (it == measures_.end() || it->second.samples == 0) return std::nullopt;
  return Marginal(it->second);
}

std::string SliceBalancer::Describe(const std::vector<int>& live) const {
  std::string out;
  for (int rank : live) {
    auto it = measures_.find(rank);
    if (it == measures_.end() || it->second.samples == 0) continue;
    out += fmt::format("{}worker {} {:.0f} samples/s", out.empty() ? "" : ", ", rank,
                       1e6 / Marginal(it->second));
  }
  if (fixed_ > 0) out += fmt::format(" (beyond a fixed {:.2f} ms a step)", fixed_ / 1000);
  return out;
}

std::optional<std::string> SliceBalancer::Disagreement(const std::vector<int>& live,
                                                       Clock::time_point now,
                                                       Clock::duration patience) {
  std::map<uint32_t, std::vector<int>> by_batch;
  for (int rank : live) {
    auto it = measures_.find(rank);
    if (it != measures_.end() && it->second.global_batch > 0) {
      by_batch[it->second.global_batch].push_back(rank);
    }
  }
  if (by_batch.size() < 2) {
    disagree_since_.reset();
    return std::nullopt;
  }
  if (!disagree_since_) disagree_since_ = now;
  if (now - *disagree_since_ < patience) return std::nullopt;
  std::string what;
  for (const auto& [batch, ranks] : by_batch) {
    what += fmt::format("{}worker(s) {} a global batch of {}", what.empty() ? "" : ", ",
                        fmt::join(ranks, ","), batch);
  }
  return what;
}

std::vector<int> SliceBalancer::NeverSliced(const std::vector<int>& live, uint64_t after) const {
  std::vector<int> out;
  for (int rank : live) {
    auto it = measures_.find(rank);
    if (it == measures_.end() || it->second.step <= after) return {};  // once all are past it
    if (it->second.global_batch == 0) out.push_back(rank);
  }
  return out;
}

}  // namespace een
