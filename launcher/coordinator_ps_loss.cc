// Coordinator: a lost PS. With replicas 2 its backups take over (failover);
// with snapshots every PS rolls back; a replacement or a spare takes its
// rank. See coordinator.h.
#include <fmt/format.h>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"

namespace een {

using transport::Message;

std::vector<bool> Coordinator::UsablePs() const {
  std::vector<bool> usable;
  for (const Node& p : ps_) usable.push_back(p.registered && !p.lost && !p.done);
  return usable;
}

size_t Coordinator::LivePsCount() const {
  size_t n = 0;
  for (const Node& p : ps_) n += p.lost ? 0 : 1;
  return n;
}

Status Coordinator::SendToLivePs(const std::function<void(wire::Header::Builder)>& fill,
                                 const std::string& what) {
  Status first;
  for (const Node& p : ps_) {
    if (p.lost) continue;
    wire::Outgoing b;
    fill(b.header());
    if (Status s = listener_->Send(p.control, b.Take()); !s.ok()) {
      spdlog::warn("could not reach ps {} about {}: {}", p.rank, what, s.ToString());
      if (first.ok()) first = s;
    }
  }
  return first;
}

void Coordinator::SendMapChange() {
  Ignored(SendToLivePs([&](wire::Header::Builder h) { map_->ToWire(h.initMapChange()); },
                       "the new shard map"),
          "sending the new shard map");
}

bool Coordinator::FailOver(Node& lost, const std::string& why) {
  std::vector<bool> usable = UsablePs();
  usable[lost.rank] = false;
  // The first map of a fresh job: a backup still waiting for its image
  // waits for worker 0's initial values, which worker 0 keeps until step 1
  // is everywhere (no primary answers step 1 before its backup confirmed
  // it) and sends again to the new primaries. Later maps' backups are built
  // from trained values nobody else holds.
  const bool initial_values_kept = map_epoch_ == 1 && !options_.resume;
  bool backups_pending = false;
  for (uint32_t s = 0; s < map_->num_shards(); ++s) {
    const uint32_t backup = map_->BackupOfShard(s);
    if (map_->OwnerOfShard(s) != static_cast<uint32_t>(lost.rank) || backup == ShardMap::kNoPs)
      continue;
    if (ps_[backup].chunks_ready != map_epoch_ && initial_values_kept) {
      backups_pending = true;
    } else if (ps_[backup].chunks_ready != map_epoch_) {
      spdlog::warn("{}; no failover: ps {} is still building its backups of shard map epoch {}",
                   why, backup, map_epoch_);
      return false;
    }
  }
  auto next = map_->AfterLoss(lost.rank, usable, map_epoch_ + 1);
  if (!next.ok()) {
    spdlog::warn("{}; no failover: {}", why, next.status().message());
    return false;
  }
  std::set<uint32_t> heirs;
  size_t shards = 0, rebuilt = 0;  // shards that hold chunks
  uint64_t bytes = 0;
  const std::vector<uint64_t> shard_bytes = map_->BytesPerShard();
  for (uint32_t s = 0; s < map_->num_shards(); ++s) {
    if (map_->OwnerOfShard(s) == static_cast<uint32_t>(lost.rank) && shard_bytes[s] > 0) {
      ++shards;
      bytes += shard_bytes[s];
      heirs.insert(next->OwnerOfShard(s));
    }
    if (shard_bytes[s] > 0 && next->BackupOfShard(s) != map_->BackupOfShard(s) &&
        next->BackupOfShard(s) != ShardMap::kNoPs) {
      ++rebuilt;
    }
  }
  std::string to;
  for (uint32_t h : heirs) to += fmt::format("{}ps {}", to.empty() ? "" : ", ", h);
  lost.lost = true;
  map_epoch_++;
  map_ = std::move(next).value();
  map_moved_ = true;
  spdlog::warn(
      "{}; failing over: its {} shard(s) ({} bytes) are served by their backups on {} "
      "from now, shard map epoch {}; {} new backup(s) being built{}{}",
      why, shards, bytes, to.empty() ? "no PS" : to, map_epoch_, rebuilt,
      LivePsCount() < 2 && spares_.empty() ? " (one PS left: no copies until a replacement joins)"
                                           : "",
      backups_pending ? "; the backups not yet built get the initial values again "
                        "from worker 0"
                      : "");
  SendMapChange();
  SaveState();
  UseSpare(lost.rank);
  return true;
}

Status Coordinator::ReplacePs(int rank, const PsProcess& process, const std::string& why) {
  Node& old = ps_[rank];
  if (!old.lost) {  // not declared lost yet: it is now
    PsLost(old, why);
    if (state_ != wire::JobState::RUNNING) return FailedPrecondition(abort_reason_);
  }
  old.host = process.host;
  old.pid = process.pid;
  old.metrics.clear();  // the replacement starts its own counts
  old.data_address = process.data_address;
  old.control = process.control;
  old.lost = false;
  old.done = false;
  old.liveness.Restart(Clock::now());
  if (recovering_) {  // rolling back: it loads the lost PS's snapshot
    spdlog::info("{} takes over its shards from the snapshot of step {}", Describe(old),
                 rollback_step_);
    EEN_RETURN_IF_ERROR(SendJobStart(old));
    ps_ready_.insert(old.rank);
    MaybeEndRecovery();
    SaveState();
    return Status::Ok();
  }
  // Failed over already: it joins as the holder of new backups.
  map_epoch_++;
  map_ = map_->WithPs(old.rank, old.data_address, UsablePs(), map_epoch_);
  size_t backups = 0;
  for (uint32_t c = 0; c < map_->chunks().size(); ++c) {
    backups += map_->BackupOfChunk(c) == static_cast<uint32_t>(old.rank) ? 1 : 0;
  }
  spdlog::info(
      "{} joins the running job: it backs up {} chunk(s), built from their primaries; "
      "shard map epoch {}",
      Describe(old), backups, map_epoch_);
  EEN_RETURN_IF_ERROR(SendJobStart(old, /*rebuild=*/true));
  SendMapChange();
  SaveState();
  return Status::Ok();
}

void Coordinator::UseSpare(int rank) {
  if (spares_.empty() || state_ != wire::JobState::RUNNING || !ps_[rank].lost) return;
  const PsProcess spare = spares_.front();
  spares_.erase(spares_.begin());
  spdlog::info("spare PS (host {}, pid {}) takes over as ps {}", spare.host, spare.pid, rank);
  if (Status s = ReplacePs(rank, spare, ""); !s.ok()) {
    spdlog::warn("the spare could not take over ps {}: {}", rank, s.ToString());
  }
}

void Coordinator::ReleaseSpares() {
  for (const PsProcess& spare : spares_) {
    wire::Outgoing b;
    auto reply = b.header().initHeartbeatReply();
    reply.setIncarnation(incarnation_);
    reply.setState(state_);
    reply.setReason(abort_reason_);
    Ignored(listener_->Send(spare.control, b.Take()), "telling a spare the job ended");
  }
  spares_.clear();
}

void Coordinator::BeginRecovery(Node& lost, const std::string& why) {
  if (optimizer_.kind == OptimizerConfig::Kind::kSum) {
    Abort(why + "; a sum-mode job cannot roll back (its model lives in the workers), so it ends");
    return;
  }
  uint64_t job_step = 0;
  for (const Node& w : workers_) job_step = std::max(job_step, w.step);
  if (complete_snapshot_ == 0) {
    Abort(why +
          "; no snapshot is complete yet to roll back to, so the job ends (snapshots "
          "every " +
          std::to_string(options_.job.snapshot_every) + " steps)");
    return;
  }
  if (map_moved_) {
    Abort(why +
          "; a failover already moved shards, so the snapshots (taken with the first "
          "shard map) cannot be rolled back to; the job ends (resume it with --resume)");
    return;
  }
  lost.lost = true;
  recovering_ = true;
  recovery_started_ = Clock::now();
  rollback_step_ = complete_snapshot_;
  map_epoch_++;
  rollback_epoch_ = map_epoch_;
  ps_ready_.clear();
  spdlog::warn(
      "{}; rolling back to the snapshot of step {}: steps {}-{} are redone; shard map "
      "epoch {}; waiting for a replacement of ps {}",
      why, rollback_step_, rollback_step_ + 1, std::max(job_step, rollback_step_ + 1), map_epoch_,
      lost.rank);
  Ignored(SendToLivePs(
              [&](wire::Header::Builder h) {
                auto rb = h.initRollback();
                rb.setEpoch(map_epoch_);
                rb.setStep(rollback_step_);
              },
              "the rollback"),
          "sending the rollback");
  SaveState();
  UseSpare(lost.rank);
}

Status Coordinator::HandleRolledBack(const transport::PeerId& peer, wire::Rollback::Reader done) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::PS) return InvalidArgument("rollback answer from a non-PS");
  if (!recovering_ || done.getEpoch() != map_epoch_) return Status::Ok();
  ps_ready_.insert(n->rank);
  MaybeEndRecovery();
  return Status::Ok();
}

void Coordinator::MaybeEndRecovery() {
  if (!recovering_ || ps_ready_.size() < ps_.size()) return;
  recovering_ = false;
  spdlog::info("every PS is back at step {} (shard map epoch {}); training resumes", rollback_step_,
               map_epoch_);
  for (const transport::PeerId& peer : map_requests_) {
    if (Node* w = NodeByControl(peer))
      Ignored(SendJobStart(*w), "answering a map request after the rollback");
  }
  map_requests_.clear();
}

}  // namespace een
