// MembershipRound: the coordinator's protocol for changing which workers
// train, agreed with every PS.
//
// A round proposes the live workers (and, --dynamic-slicing, their shares
// of the global batch) under a new membership epoch
// (Begin(): the coordinator sends the Prepare to every live PS). Each PS
// holds its answers beyond its newest version and says which that is
// (Prepared()); once every live PS has answered, the change takes effect at
// the step after the newest of them, and Prepared() returns the Commit the
// coordinator sends. When the commit reached every PS, Committed() records
// it in the history (only a change of the live set is history). One round
// at a time: a change wanted while one is pending waits for its commit
// (Outdated() then says a new round is due). A round that waits for a PS
// that is lost, or that a PS which joined since never heard of, never
// completes: the coordinator begins it again (Begin() under a new epoch;
// the PS answer each prepare, and only the newest round's answers count).
// For each worker lost, the PS say the first step its gradients are
// missing from (bsp): the commit carries the earliest of them, across the
// rounds begun again too (een/membership.h UnfinishedSteps).
// Data drawn ahead (bsp, `look_ahead` > 0: the workers' loops had drawn up
// to that many steps past the one they train, in the old layout): a change
// that loses workers takes effect at once, its data from `look_ahead` steps
// later (data_step; the lost workers' batches up to there are owed); one
// that only adds workers or new shares takes effect `look_ahead` steps
// later (nobody waits for the joiners before). A round that would do both
// commits the loss alone: its joiners wait for the next round (Outdated()).
// A commit never takes effect before the last one did.
// The history is what a joining
// worker and --resume need to place the data: every committed change,
// oldest first, the job's start included.
// Thread safety: none; the coordinator's thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "een/membership.h"

namespace een {

class MembershipRound {
 public:
  struct Prepare {
    uint64_t epoch = 0;
    std::vector<int> live;  // worker ranks, ascending
  };
  struct Commit {
    uint64_t epoch = 0;
    uint64_t step = 0;             // the first step the new membership trains
    std::vector<int> live;         // worker ranks, ascending
    std::vector<uint32_t> shares;  // of the global batch, in `live`'s order (empty: equal)
    std::vector<UnfinishedSteps> unfinished;  // workers lost, with their unfinished steps
    bool changed = false;    // the live set or the shares differ from the last committed
    uint64_t data_step = 0;  // the first step whose data follow the change (0: `step`)
    uint64_t frozen_at = 0;  // the step after the PS' newest versions (a snapshot's)
  };

  // Taken up from a restarted coordinator's saved state. `interrupted`: a
  // round was under way when it died (its PS wait for a commit): a new
  // round is due as soon as every PS can be reached.
  void Restore(uint64_t epoch, std::vector<MembershipChange> history, bool interrupted);
  // The job starts at `step` with every worker in `live`; `before` (when
  // resuming): the changes committed before the snapshot's step.
  void StartJob(std::vector<MembershipChange> before, uint64_t step, std::vector<int> live);

  // Opens a round for `live` (with batch `shares`, empty: equal) under the next epoch.
  Prepare Begin(std::vector<int> live, std::vector<uint32_t> shares = {});
  // PS `ps` answered the round `epoch` with its newest version. Returns the
  // commit once every PS in `serving` (the PS serving now, ascending) has
  // answered this round; an answer to another round, with none pending, or
  // from a PS not serving (lost, or drained and gone), is ignored.
  // `unfinished`: the lost workers' first steps missing on that PS.
  // `look_ahead`: the steps the workers' loops draw ahead (bsp; 0: none).
  std::optional<Commit> Prepared(int ps, uint64_t epoch, uint64_t max_version,
                                 const std::vector<int>& serving,
                                 const std::vector<UnfinishedSteps>& unfinished = {},
                                 uint64_t look_ahead = 0);
  // Every PS was sent `commit`: the round is over.
  void Committed(const Commit& commit);
  // A round was interrupted by a restart and has not been begun again.
  bool interrupted() const { return interrupted_; }

  bool pending() const { return pending_; }
  uint64_t epoch() const { return epoch_; }
  // After the last round: `live` (now) differs from what it agreed.
  bool Outdated(const std::vector<int>& live) const { return live != live_; }
  // The batch shares of the latest round (empty: equal).
  const std::vector<uint32_t>& shares() const { return shares_; }
  const std::vector<MembershipChange>& history() const { return history_; }

 private:
  uint64_t epoch_ = 0;
  bool pending_ = false;
  bool interrupted_ = false;
  std::vector<int> live_;             // of the latest round
  std::vector<uint32_t> shares_;      // of the latest round
  std::map<int, uint64_t> prepared_;  // PS rank -> its newest version, this round
  // Lost worker -> its first step missing on any PS, until a commit.
  std::map<int, uint64_t> unfinished_;
  std::vector<MembershipChange> history_;
};

}  // namespace een
