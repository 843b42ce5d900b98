// What becomes of a lost PS: the coordinator's failover plan and its
// rollback protocol.
//
// With replicas 2, PlanFailover() gives the map in which the lost PS's
// backups serve its shards (and shards left without a backup get a new
// one), or says why there can be no failover: a shard with no live backup,
// or a backup still being built from values nobody else holds. Otherwise,
// with snapshots, every PS rolls back to the newest complete snapshot
// (class Rollback): a new map epoch, every live PS answers when it is back
// at that step, a replacement takes the lost one's place from the
// snapshot, and once every PS is back the workers waiting for the map get
// it. WhyNoRollback() says when a job cannot roll back.
// Thread safety: none; the coordinator's thread owns these.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/shard_map.h"
#include "common/status.h"
#include "common/transport/connection.h"

namespace een {

struct Failover {
  ShardMap map;                  // the lost PS's shards served by their backups
  size_t shards = 0;             // of the lost PS's shards, those holding chunks
  uint64_t bytes = 0;            // their parameter bytes
  std::set<uint32_t> heirs;      // the PS that serve them now
  size_t rebuilt = 0;            // shards that get a new backup
  bool backups_pending = false;  // some heir's backups were still being built
};

// PS `lost` is gone from `map` (now at `map_epoch`; `chunks_ready[ps]`: the
// map epoch whose chunks each PS holds, `usable[ps]`: alive and serving).
// `initial_values_kept`: the first map of a fresh job, where a backup
// still being built gets worker 0's initial values again; otherwise a
// backup not yet built cannot take over. FailedPrecondition says why not.
Result<Failover> PlanFailover(const ShardMap& map, uint32_t lost, uint64_t map_epoch,
                              std::vector<bool> usable, const std::vector<uint64_t>& chunks_ready,
                              bool initial_values_kept);

// Why the job cannot roll back a lost PS (appended to the loss's message),
// or nullopt when it can. `finished_past`: a worker (rank, step) that
// finished training past the snapshot (Finish(): it cannot redo its steps).
std::optional<std::string> WhyNoRollback(
    bool sum_mode, uint64_t complete_snapshot, int snapshot_every, bool map_moved,
    std::optional<std::pair<int, uint64_t>> finished_past = std::nullopt);

class Rollback {
 public:
  using Clock = std::chrono::steady_clock;

  // Taken up after a restart: the latest rollback's map epoch (0: none)
  // and the step it went back to.
  void Restore(uint64_t epoch, uint64_t step) {
    epoch_ = epoch;
    step_ = step;
  }
  // Every PS goes back to the snapshot of `step` under map epoch `epoch`.
  void Begin(uint64_t step, uint64_t epoch, Clock::time_point now);
  bool active() const { return active_; }
  uint64_t step() const { return step_; }
  // The map epoch of the latest rollback (0: the job never rolled back).
  uint64_t epoch() const { return epoch_; }
  // PS `ps` is back at the step (its answer to `epoch`, or a replacement
  // that loads the snapshot). Answers to another rollback are ignored.
  void Ready(int ps, uint64_t epoch);
  // Every one of `num_ps` PS is back.
  bool Complete(size_t num_ps) const { return active_ && ready_.size() >= num_ps; }
  // No replacement registered within `timeout` of the start.
  bool TimedOut(Clock::time_point now, std::chrono::milliseconds timeout) const {
    return active_ && now - started_ > timeout;
  }
  // A worker asks for the map meanwhile: answered at the end.
  void Queue(const transport::PeerId& worker) { map_requests_.push_back(worker); }
  // Training resumes: the workers waiting for the map.
  std::vector<transport::PeerId> End();

 private:
  bool active_ = false;
  uint64_t step_ = 0;
  uint64_t epoch_ = 0;
  Clock::time_point started_;
  std::set<int> ready_;
  std::vector<transport::PeerId> map_requests_;
};

}  // namespace een
