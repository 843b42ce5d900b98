// SnapshotAgreement: see snapshot_agreement.h.
#include "launcher/snapshot_agreement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace een {

namespace {

// Why no step is on every PS: what each one holds, and a likely cause.
std::string NoCommonStep(const std::vector<SnapshotAgreement::Found>& per_ps) {
  std::vector<std::string> each;
  size_t holding = 0;  // PS 0..holding-1 hold snapshots, the others none at all
  bool prefix = true;
  for (size_t r = 0; r < per_ps.size(); ++r) {
    const SnapshotAgreement::Found& f = per_ps[r];
    if (!f.intact.empty()) {
      each.push_back(fmt::format("ps {} holds steps {}", r, fmt::join(f.intact, ",")));
      if (prefix) holding = r + 1;
    } else {
      each.push_back(
          fmt::format("ps {} none: {}", r, f.problem.empty() ? "no snapshot" : f.problem));
      prefix = false;
    }
  }
  bool rest_empty = holding > 0 && holding < per_ps.size();
  for (size_t r = holding; r < per_ps.size() && rest_empty; ++r) {
    rest_empty = per_ps[r].none;
  }
  std::string hint = "start without --resume (and another --snapshot-dir) to train from scratch";
  if (rest_empty) {
    hint = fmt::format(
        "only ps 0..{} hold snapshots there: was the run started with --ps {}? resume with the "
        "--ps it was started with; or {}",
        holding - 1, holding, hint);
  }
  return fmt::format(
      "cannot resume: no snapshot is complete and intact on every one of the {} PS ({}); {}",
      per_ps.size(), fmt::join(each, "; "), hint);
}

}  // namespace

Result<uint64_t> SnapshotAgreement::PickResumeStep(const std::vector<Found>& per_ps) {
  if (per_ps.empty()) return FailedPrecondition("cannot resume: the job has no PS");
  std::vector<uint64_t> common = per_ps[0].intact;
  for (const Found& f : per_ps) {
    std::vector<uint64_t> both;
    for (uint64_t step : common) {
      if (std::find(f.intact.begin(), f.intact.end(), step) != f.intact.end()) {
        both.push_back(step);
      }
    }
    common = both;
  }
  if (common.empty()) return FailedPrecondition(NoCommonStep(per_ps));
  const uint64_t step = *std::max_element(common.begin(), common.end());
  uint64_t newest = step;
  for (const Found& f : per_ps) {
    for (uint64_t s : f.intact) newest = std::max(newest, s);
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
