// MembershipRound: see membership_round.h.
#include "launcher/membership_round.h"

#include <algorithm>

namespace een {

void MembershipRound::Restore(uint64_t epoch, std::vector<MembershipChange> history,
                              bool interrupted) {
  epoch_ = epoch;
  history_ = std::move(history);
  interrupted_ = interrupted;
  pending_ = false;
  prepared_.clear();
  unfinished_.clear();
  live_ = history_.empty() ? std::vector<int>() : history_.back().live;
  shares_ = history_.empty() ? std::vector<uint32_t>() : history_.back().shares;
}

void MembershipRound::StartJob(std::vector<MembershipChange> before, uint64_t step,
                               std::vector<int> live) {
  history_ = std::move(before);
  epoch_ = history_.empty() ? 0 : history_.back().epoch + 1;
  live_ = live;
  shares_.clear();
  history_.push_back({step, std::move(live), epoch_});  // the start: everyone, equal shares
}

MembershipRound::Prepare MembershipRound::Begin(std::vector<int> live,
                                                std::vector<uint32_t> shares) {
  ++epoch_;
  pending_ = true;
  interrupted_ = false;
  live_ = std::move(live);
  shares_ = std::move(shares);
  prepared_.clear();
  return {epoch_, live_};
}

std::optional<MembershipRound::Commit> MembershipRound::Prepared(
    int ps, uint64_t epoch, uint64_t max_version, const std::vector<int>& serving,
    const std::vector<UnfinishedSteps>& unfinished) {
  if (!pending_ || epoch != epoch_) return std::nullopt;
  if (std::find(serving.begin(), serving.end(), ps) == serving.end()) return std::nullopt;
  prepared_[ps] = max_version;
  for (const UnfinishedSteps& u : unfinished) {
    auto [at, added] = unfinished_.emplace(u.worker, u.from_step);
    if (!added) at->second = std::min(at->second, u.from_step);
  }
  uint64_t step = 0;
  for (int rank : serving) {
    auto answer = prepared_.find(rank);
    if (answer == prepared_.end()) return std::nullopt;  // still waiting for it
    step = std::max(step, answer->second + 1);
  }
  const bool changed =
      history_.empty() || history_.back().live != live_ || history_.back().shares != shares_;
  std::vector<UnfinishedSteps> owed;
  for (const auto& [worker, from] : unfinished_) {
    const bool gone = std::find(live_.begin(), live_.end(), worker) == live_.end();
    if (changed && gone && from < step) owed.push_back({worker, from});
  }
  return Commit{epoch_, step, live_, shares_, std::move(owed), changed};
}

void MembershipRound::Committed(const Commit& commit) {
  pending_ = false;
  unfinished_.clear();
  if (commit.changed) {
    history_.push_back({commit.step, commit.live, commit.epoch, commit.shares, commit.unfinished});
  }
}

}  // namespace een
