// PS failover plans and the rollback protocol: see ps_recovery.h.
#include "launcher/ps_recovery.h"

#include <fmt/format.h>

namespace een {

Result<Failover> PlanFailover(const ShardMap& map, uint32_t lost, uint64_t map_epoch,
                              std::vector<bool> usable, const std::vector<uint64_t>& chunks_ready,
                              bool initial_values_kept) {
  if (lost >= usable.size() || usable.size() != chunks_ready.size()) {
    return InvalidArgument(fmt::format("no ps {} among {}", lost, usable.size()));
  }
  usable[lost] = false;
  Failover plan;
  for (uint32_t s = 0; s < map.num_shards(); ++s) {
    const uint32_t backup = map.BackupOfShard(s);
    if (map.OwnerOfShard(s) != lost || backup == ShardMap::kNoPs) continue;
    // Built: its PS holds every chunk of a map since which it backs this
    // shard up (a PS that just took new backups elsewhere, after an earlier
    // loss, still holds its older ones: a whole host lost at once).
    if (backup < chunks_ready.size() && chunks_ready[backup] >= map.BackupSince(s)) continue;
    if (!initial_values_kept) {
      return FailedPrecondition(fmt::format(
          "ps {} is still building its backups of shard map epoch {}", backup, map.BackupSince(s)));
    }
    plan.backups_pending = true;
  }
  EEN_ASSIGN_OR_RETURN(plan.map, map.AfterLoss(lost, usable, map_epoch + 1));
  const std::vector<uint64_t> shard_bytes = map.BytesPerShard();
  for (uint32_t s = 0; s < map.num_shards(); ++s) {
    if (map.OwnerOfShard(s) == lost && shard_bytes[s] > 0) {
      ++plan.shards;
      plan.bytes += shard_bytes[s];
      plan.heirs.insert(plan.map.OwnerOfShard(s));
    }
    if (shard_bytes[s] > 0 && plan.map.BackupOfShard(s) != map.BackupOfShard(s) &&
        plan.map.BackupOfShard(s) != ShardMap::kNoPs) {
      ++plan.rebuilt;
    }
  }
  return plan;
}

std::optional<std::string> WhyNoRollback(bool sum_mode, uint64_t complete_snapshot,
                                         int snapshot_every, bool map_moved,
                                         std::optional<std::pair<int, uint64_t>> finished_past) {
  if (sum_mode) {
    return "a sum-mode job cannot roll back (its model lives in the workers), so it ends";
  }
  if (complete_snapshot == 0) {
    return fmt::format(
        "no snapshot is complete yet to roll back to, so the job ends (snapshots every {} steps)",
        snapshot_every);
  }
  if (finished_past) {
    return fmt::format(
        "worker {} had finished training at step {}, past the last complete snapshot (step {}): "
        "its steps after that cannot be redone, so the job does not roll back; it ends (resume "
        "it with --resume, or use --replicas 2 to train on through a lost PS)",
        finished_past->first, finished_past->second, complete_snapshot);
  }
  if (map_moved) {
    return "a failover already moved shards, so the snapshots (taken with the first shard map) "
           "cannot be rolled back to; the job ends (resume it with --resume)";
  }
  return std::nullopt;
}

void Rollback::Begin(uint64_t step, uint64_t epoch, Clock::time_point now) {
  active_ = true;
  step_ = step;
  epoch_ = epoch;
  started_ = now;
  ready_.clear();
}

void Rollback::Ready(int ps, uint64_t epoch) {
  if (active_ && epoch == epoch_) ready_.insert(ps);
}

std::vector<transport::PeerId> Rollback::End() {
  active_ = false;
  std::vector<transport::PeerId> waiting = std::move(map_requests_);
  map_requests_.clear();
  return waiting;
}

}  // namespace een
