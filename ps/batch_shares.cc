// BatchShares: see batch_shares.h.
#include "ps/batch_shares.h"

#include <algorithm>
#include <string>

namespace een::ps {

namespace {
constexpr size_t kKept = 64;  // steps in flight never reach this many changes back
constexpr uint64_t kMaxGlobalBatch = uint64_t{1} << 31;
}  // namespace

Status BatchShares::Add(const MembershipChange& change) {
  if (!change.shares.empty()) {
    if (change.shares.size() != change.live.size()) {
      return InvalidArgument("membership " + std::to_string(change.epoch) + " gives " +
                             std::to_string(change.shares.size()) + " batch shares for " +
                             std::to_string(change.live.size()) + " live workers");
    }
    uint64_t sum = 0;
    for (uint32_t s : change.shares) {
      if (s == 0) return InvalidArgument("a batch share of 0 samples");
      sum += s;  // at most 2^32 shares of < 2^32: no overflow in 64 bits
      if (sum > kMaxGlobalBatch) return InvalidArgument("a global batch of over 2^31 samples");
    }
  }
  if (!changes_.empty() && change.step < changes_.back().step) {
    return Status::Ok();  // older than what is known (a repeat of the history)
  }
  if (!changes_.empty() && change.step == changes_.back().step) changes_.pop_back();
  changes_.push_back(change);
  if (changes_.size() > kKept) changes_.erase(changes_.begin());
  return Status::Ok();
}

const MembershipChange* BatchShares::InForce(uint64_t version) const {
  const MembershipChange* in_force = nullptr;
  for (const MembershipChange& c : changes_) {
    if (c.step < version) in_force = &c;
  }
  return in_force;
}

float BatchShares::WeightOf(uint64_t version, int worker) const {
  const MembershipChange* in_force = InForce(version);
  if (!in_force) return 1.0f;
  const std::vector<float> weights = WeightsUnder(in_force, in_force->live);
  auto at = std::find(in_force->live.begin(), in_force->live.end(), worker);
  if (weights.empty() || at == in_force->live.end()) return 1.0f;
  return weights[at - in_force->live.begin()];
}

std::vector<float> BatchShares::Weights(uint64_t version, const std::vector<int>& workers) const {
  return WeightsUnder(InForce(version), workers);
}

std::vector<float> BatchShares::WeightsUnder(const MembershipChange* in_force,
                                             const std::vector<int>& workers) {
  if (!in_force || in_force->shares.empty() || workers.size() < 2) return {};
  std::vector<uint64_t> samples;
  uint64_t sum = 0;
  for (int w : workers) {
    auto at = std::find(in_force->live.begin(), in_force->live.end(), w);
    if (at == in_force->live.end()) return {};
    samples.push_back(in_force->shares[at - in_force->live.begin()]);
    sum += samples.back();
  }
  if (std::all_of(samples.begin(), samples.end(), [&](uint64_t s) { return s == samples[0]; })) {
    return {};
  }
  std::vector<float> weights;
  const double count = static_cast<double>(workers.size());
  for (uint64_t s : samples) {
    weights.push_back(
        static_cast<float>(static_cast<double>(s) * count / static_cast<double>(sum)));
  }
  return weights;
}

}  // namespace een::ps
