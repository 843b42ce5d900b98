// Coordinator: a lost PS. With replicas 2 its backups take over (failover);
// with snapshots every PS rolls back (PlanFailover and Rollback,
// ps_recovery.h); a replacement or a spare takes its rank. See coordinator.h.
#include <fmt/format.h>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"
#include "launcher/coordinator_messages.h"

namespace een {

using transport::Message;

std::vector<bool> Coordinator::UsablePs() const {
  std::vector<bool> usable;
  for (const Node& p : ps_) usable.push_back(p.active());
  return usable;
}

std::vector<int> Coordinator::ServingPs() const {
  std::vector<int> serving;
  for (const Node& p : ps_) {
    if (p.active()) serving.push_back(p.rank);
  }
  return serving;
}

Status Coordinator::SendToLivePs(const std::function<Message()>& make, const std::string& what) {
  std::vector<int> live;
  for (const Node& p : ps_) {
    if (!p.lost) live.push_back(p.rank);
  }
  return SendToPs(live, make, what);
}

Status Coordinator::SendToPs(const std::vector<int>& ranks, const std::function<Message()>& make,
                             const std::string& what) {
  Status first;
  for (int rank : ranks) {
    const Node& p = ps_[rank];
    if (Status s = listener_->Send(p.control, make()); !s.ok()) {
      spdlog::warn("could not reach ps {} about {}: {}", p.rank, what, s.ToString());
      if (first.ok()) first = s;
    }
  }
  return first;
}

void Coordinator::SendMapChange() {
  Ignored(SendToLivePs([&] { return coordinator_messages::MapChange(*map_); }, "the new shard map"),
          "sending the new shard map");
}

bool Coordinator::FailOver(Node& lost, const std::string& why) {
  // Before any worker finished step 1, every value is worker 0's initial
  // one, which worker 0 keeps until it pulled step 1 (no primary answers
  // step 1 before its backup confirmed it) and sends again to the new
  // primaries after every map change: a backup not yet built is rebuilt
  // from them, whatever the map's epoch (a whole host lost at the start
  // loses its PS one after the other). Once training went on, backups are
  // built from trained values nobody else holds. (The een backend's PS hold
  // no model at all: its workers' "steps" count collective calls.)
  const Node& first = workers_[0];
  const bool initial_values_kept =
      ServesProcessGroups() || (!options_.resume && first.registered && !first.lost &&
                                !first.done && NewestWorkerStep() == 0);
  RefreshPsHosts();
  Result<Failover> plan =
      PlanFailover(*map_, lost.rank, map_epoch_, UsablePs(), ChunksReady(), initial_values_kept);
  if (!plan.ok()) {
    spdlog::warn("{}; no failover: {}", why, plan.status().message());
    return false;
  }
  lost.lost = true;
  map_epoch_++;
  map_ = std::move(plan->map);
  map_moved_ = true;
  spdlog::warn(
      "{}; failing over: its {} shard(s) ({} bytes) are served by their backups on {} "
      "from now, shard map epoch {}; {} new backup(s) being built{}{}",
      why, plan->shards, plan->bytes, PsList(plan->heirs), map_epoch_, plan->rebuilt,
      ServingPs().size() < 2 && spares_.empty()
          ? " (one PS left: no copies until a replacement joins)"
          : "",
      plan->backups_pending ? "; the backups not yet built get the initial values again "
                              "from worker 0"
                            : "");
  SendMapChange();
  SaveState();
  UseSpare(lost.rank);
  return true;
}

Status Coordinator::ReplacePs(int rank, const Process& process, const std::string& why) {
  Node& old = ps_[rank];
  if (!old.lost) {  // not declared lost yet: it is now
    PsLost(old, why);
    if (state_ != wire::JobState::RUNNING) return FailedPrecondition(abort_reason_);
  }
  old.Take(process, Clock::now());
  old.lost = false;
  old.done = false;
  if (rollback_.active()) {  // rolling back: it loads the lost PS's snapshot
    spdlog::info("{} takes over its shards from the snapshot of step {}", Describe(old),
                 rollback_.step());
    EEN_RETURN_IF_ERROR(SendJobStart(old));
    rollback_.Ready(old.rank, rollback_.epoch());
    MaybeEndRecovery();
    SaveState();
    PsChanged();
    return Status::Ok();
  }
  // Failed over already: it joins as the holder of new backups.
  map_epoch_++;
  RefreshPsHosts();  // the replacement may run on another host
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
  PsChanged();
  return Status::Ok();
}

void Coordinator::UseSpare(int rank) {
  if (spares_.empty() || state_ != wire::JobState::RUNNING || !ps_[rank].lost) return;
  const Process spare = spares_.front();
  spares_.erase(spares_.begin());
  spdlog::info("spare PS (host {}, pid {}) takes over as ps {}", spare.host, spare.pid, rank);
  if (Status s = ReplacePs(rank, spare, ""); !s.ok()) {
    spdlog::warn("the spare could not take over ps {}: {}", rank, s.ToString());
  }
}

void Coordinator::ReleaseSpares() {
  for (const Process& spare : spares_) {
    Ignored(listener_->Send(spare.control, coordinator_messages::HeartbeatReply(
                                               incarnation_, 0, state_, abort_reason_)),
            "telling a spare the job ended");
  }
  spares_.clear();
}

void Coordinator::BeginRecovery(Node& lost, const std::string& why) {
  std::optional<std::pair<int, uint64_t>> finished_past;
  for (const Node& w : workers_) {
    if (w.done && !w.lost && w.step > snapshots_.complete()) finished_past = {{w.rank, w.step}};
  }
  if (auto no = WhyNoRollback(optimizer_.kind == OptimizerConfig::Kind::kSum, snapshots_.complete(),
                              options_.job.snapshot_every, map_moved_, finished_past)) {
    Abort(why + "; " + *no);
    return;
  }
  const uint64_t job_step = NewestWorkerStep();
  lost.lost = true;
  map_epoch_++;
  rollback_.Begin(snapshots_.complete(), map_epoch_, Clock::now());
  const uint64_t step = rollback_.step();
  // (ssp/async: NextBatch() deals on; each worker deals the batches of its undone steps again.)
  SendBackFromBarriers();
  spdlog::warn(
      "{}; rolling back to the snapshot of step {}: steps {}-{} are redone; shard map "
      "epoch {}; waiting for a replacement of ps {}",
      why, step, step + 1, std::max(job_step, step + 1), map_epoch_, lost.rank);
  Ignored(SendToLivePs([&] { return coordinator_messages::Rollback(map_epoch_, step); },
                       "the rollback"),
          "sending the rollback");
  SaveState();
  UseSpare(lost.rank);
}

Status Coordinator::HandleRolledBack(const transport::PeerId& peer, wire::Rollback::Reader done) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::PS) return InvalidArgument("rollback answer from a non-PS");
  rollback_.Ready(n->rank, done.getEpoch());
  MaybeEndRecovery();
  return Status::Ok();
}

void Coordinator::MaybeEndRecovery() {
  if (!rollback_.Complete(ps_.size())) return;
  spdlog::info("every PS is back at step {} (shard map epoch {}); training resumes",
               rollback_.step(), map_epoch_);
  for (const transport::PeerId& peer : rollback_.End()) {
    if (Node* w = NodeByControl(peer))
      Ignored(SendJobStart(*w), "answering a map request after the rollback");
  }
}

}  // namespace een
