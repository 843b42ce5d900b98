// SnapshotAgreement: see snapshot_agreement.h.
#include "launcher/snapshot_agreement.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace een {

Result<uint64_t> SnapshotAgreement::PickResumeStep(
    const std::vector<std::vector<uint64_t>>& per_ps) {
  if (per_ps.empty()) return FailedPrecondition("cannot resume: the job has no PS");
  std::vector<uint64_t> common = per_ps[0];
  for (const std::vector<uint64_t>& steps : per_ps) {
    std::vector<uint64_t> both;
    for (uint64_t step : common) {
      if (std::find(steps.begin(), steps.end(), step) != steps.end()) both.push_back(step);
    }
    common = both;
  }
  if (common.empty()) {
    return FailedPrecondition(
        "cannot resume: no snapshot is complete and intact on every one of the " +
        std::to_string(per_ps.size()) +
        " PS (see their log lines); start without --resume to train from scratch");
  }
  const uint64_t step = *std::max_element(common.begin(), common.end());
  uint64_t newest = step;
  for (const std::vector<uint64_t>& steps : per_ps) {
    for (uint64_t s : steps) newest = std::max(newest, s);
  }
  if (newest > step) {
    spdlog::warn("the snapshot of step {} is not intact on every PS; using step {}", newest, step);
  }
  return step;
}

std::optional<uint64_t> SnapshotAgreement::Note(const std::vector<uint64_t>& newest) {
  if (newest.empty()) return std::nullopt;
  const uint64_t complete = *std::min_element(newest.begin(), newest.end());
  if (complete <= complete_) return std::nullopt;
  complete_ = complete;
  return complete;
}

void SnapshotAgreement::BeginRound() {
  // A round begun again (the PS changed under it) still serves its own.
  in_round_.insert(in_round_.end(), waiting_.begin(), waiting_.end());
  waiting_.clear();
}

std::vector<transport::PeerId> SnapshotAgreement::Served() {
  std::vector<transport::PeerId> served = std::move(in_round_);
  in_round_.clear();
  return served;
}

}  // namespace een
