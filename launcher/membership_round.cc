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
    const std::vector<UnfinishedSteps>& unfinished, uint64_t look_ahead) {
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
  Commit commit{epoch_, step, live_, shares_, {}, false};
  commit.frozen_at = step;
  const std::vector<int> before = history_.empty() ? std::vector<int>() : history_.back().live;
  auto in = [](const std::vector<int>& set, int w) {
    return std::find(set.begin(), set.end(), w) != set.end();
  };
  bool lost = false;
  for (int w : before) lost |= !in(live_, w);
  if (look_ahead > 0 && lost) {
    // Joiners would have no data before the data step: they wait for the next round.
    std::vector<int> kept;
    for (int w : live_) {
      if (in(before, w)) kept.push_back(w);
    }
    if (kept.size() != live_.size()) {
      live_ = commit.live = std::move(kept);
      shares_ = commit.shares = {};
    }
  }
  commit.changed =
      history_.empty() || history_.back().live != live_ || history_.back().shares != shares_;
  if (!history_.empty()) commit.step = std::max(commit.step, history_.back().step);
  if (commit.changed && look_ahead > 0 && !history_.empty()) {
    const uint64_t ahead = std::min(look_ahead, kMaxDataLookAhead);
    if (lost) {
      commit.data_step = std::max(step + ahead, history_.back().layout_step());
    } else {
      commit.step = std::max(step + ahead, history_.back().layout_step());
    }
  }
  const uint64_t layout = std::max(commit.step, commit.data_step);
  for (const auto& [worker, from] : unfinished_) {
    const bool gone = !in(live_, worker);
    if (commit.changed && gone && from < layout) commit.unfinished.push_back({worker, from});
  }
  if (commit.data_step > commit.step) {
    // Every worker that left owes its batches the others' loaders drew ahead.
    for (int w : before) {
      const bool owed = std::any_of(commit.unfinished.begin(), commit.unfinished.end(),
                                    [&](const UnfinishedSteps& u) { return u.worker == w; });
      if (!in(live_, w) && !owed) commit.unfinished.push_back({w, commit.step});
    }
  }
  return commit;
}

void MembershipRound::Committed(const Commit& commit) {
  pending_ = false;
  unfinished_.clear();
  if (commit.changed) {
    history_.push_back({commit.step, commit.live, commit.epoch, commit.shares, commit.unfinished,
                        commit.data_step});
  }
}

}  // namespace een
