// SnapshotAgreement: which snapshot the job can count on, and snapshots
// taken on demand.
//
// Every PS writes its own snapshots and says in its heartbeats the newest
// step it has written; a step is complete once every live PS has written
// it (Note()), and only a complete step is something to roll back to.
// Resuming, every PS lists the steps it holds intact, and the job starts
// from the newest step all of them hold (PickResumeStep()). An operator's
// request for a snapshot now (eenctl snapshot) waits for the next
// membership round (Ask()); the round takes the waiting requests
// (BeginRound()), and the step that round agrees on is the one every PS
// snapshots; Served() hands back whom to tell.
// Thread safety: none; the coordinator's thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport/connection.h"

namespace een {

class SnapshotAgreement {
 public:
  // What one PS found in its snapshot folder: the steps it holds intact,
  // and when none, why (its first refusal, or that it holds none), and
  // whether the folder holds no snapshot at all (intact or not).
  struct Found {
    std::vector<uint64_t> intact;
    std::string problem;
    bool none = false;
  };
  // The newest step every PS holds intact, given each PS's (by rank); else
  // an error that says what each PS holds, and why a PS holds nothing.
  static Result<uint64_t> PickResumeStep(const std::vector<Found>& per_ps);

  void Restore(uint64_t complete) { complete_ = complete; }
  // The newest step written by every live PS (0: none yet).
  uint64_t complete() const { return complete_; }
  // `newest`: the newest snapshot step of each live PS. Returns the step
  // that became complete with it, if one did.
  std::optional<uint64_t> Note(const std::vector<uint64_t>& newest);

  // An operator asked for a snapshot now: the next round serves it.
  void Ask(const transport::PeerId& requester) { waiting_.push_back(requester); }
  bool asked() const { return !waiting_.empty(); }
  // A membership round begins (or begins again): it serves every request
  // waiting so far, and those of the round it replaces.
  void BeginRound();
  // The step the round's PS snapshot (its agreed step), 0 for none.
  uint64_t StepFor(uint64_t agreed_step) const { return in_round_.empty() ? 0 : agreed_step; }
  // The round committed: whom to tell that their snapshot is under way.
  std::vector<transport::PeerId> Served();

 private:
  uint64_t complete_ = 0;
  std::vector<transport::PeerId> waiting_;   // for the next round
  std::vector<transport::PeerId> in_round_;  // served by the current round
};

}  // namespace een
