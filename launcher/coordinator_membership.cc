// Coordinator: which workers train: a lost worker drops out, a replacement
// or a new worker joins, at a step agreed with every PS. See coordinator.h.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"

namespace een {

using transport::Message;

Status Coordinator::AcceptReplacementWorker(const transport::PeerId& peer,
                                            wire::Register::Reader reg) {
  const int rank = reg.getRank();
  if (rank < 0 || rank > static_cast<int>(workers_.size())) {
    return InvalidArgument(
        fmt::format("worker rank {} is out of range (job has {}; a new worker "
                    "takes rank {})",
                    rank, workers_.size(), workers_.size()));
  }
  EEN_ASSIGN_OR_RETURN(std::vector<TensorInfo> model, TensorsFromWire(reg.getTensors()));
  EEN_RETURN_IF_ERROR(CheckSameModel(rank, model));
  const bool grows = rank == static_cast<int>(workers_.size());
  if (grows) {  // a new worker: the job grows
    workers_.emplace_back();
    workers_.back().role = wire::Role::WORKER;
    workers_.back().rank = rank;
    workers_.back().registered = true;
    workers_.back().lost = true;  // nothing to declare lost: it just joins
  }
  Node& w = workers_[rank];
  if (w.done) return JobFinished(fmt::format("worker {} has finished already", rank));
  if (w.pid == reg.getPid() && !w.lost && !w.joining) {
    // A worker asking again: its JobStart crossed our restart.
    w.control = peer;
    return SendJobStart(w, false, w.join_step);
  }
  if (w.pid == reg.getPid() && !w.lost) {  // a joiner asking again: we restarted meanwhile
    w.control = peer;
    w.joining = true;
    if (membership_pending_ || membership_restart_needed_) return Status::Ok();  // at the commit
    const auto& last = history_.empty() ? std::vector<int>() : history_.back().live;
    if (std::find(last.begin(), last.end(), rank) != last.end()) {
      w.joining = false;  // agreed already
      return SendJobStart(w, false, history_.back().step);
    }
    StartMembershipChange();
    return Status::Ok();
  }
  // A replacement, once the one it replaces is declared lost.
  if (!w.lost) return ClaimOfLiveRank(w, reg.getPid());
  claims_.erase(reg.getPid());
  w.host = reg.getHost();
  w.pid = reg.getPid();
  w.metrics.clear();  // a replacement starts its own counts
  w.control = peer;
  w.lost = false;
  w.joining = true;
  if (!grows) worker_replacements_++;
  w.liveness.Restart(Clock::now());
  spdlog::info("{} joins the running job{}: it trains from the step every PS agrees on",
               Describe(w),
               grows ? fmt::format(" as a new worker ({} in all)", workers_.size()) : "");
  if (!membership_pending_) StartMembershipChange();  // else: right after the pending one
  SaveState();
  return Status::Ok();
}

void Coordinator::WorkerLost(Node& w, const std::string& what) {
  w.lost = true;
  if (!options_.lost_path.empty()) {  // een-launch stops it if it still runs at the end
    std::ofstream(options_.lost_path, std::ios::app) << w.rank << ' ' << w.pid << '\n';
  }
  const std::vector<int> live = LiveWorkerRanks();
  const int restarts_left = options_.job.max_restarts - worker_replacements_;
  int finished = 0;  // done with their data: they count toward --min-workers
  for (const Node& x : workers_) finished += x.done && !x.lost;
  if (static_cast<int>(live.size()) + finished < options_.job.MinWorkers() && restarts_left <= 0) {
    Abort(
        fmt::format("{}; only {} worker(s) left, fewer than the {} the job needs "
                    "(--min-workers); ending the job",
                    what, live.size(), options_.job.MinWorkers()));
    return;
  }
  spdlog::warn("{}; the job goes on with {} workers (--min-workers {}{})", what, live.size(),
               options_.job.MinWorkers(),
               restarts_left > 0 ? fmt::format(", {} replacement(s) left", restarts_left) : "");
  ReleaseBarriers();
  if (!membership_pending_) StartMembershipChange();
  MaybeFinish();
  SaveState();
}

void Coordinator::StartMembershipChange() {
  membership_epoch_++;
  membership_pending_ = true;
  membership_live_ = LiveWorkerRanks();
  prepared_.clear();
  snapshot_in_round_ = std::move(snapshot_waiting_);
  snapshot_waiting_.clear();
  Ignored(SendToLivePs(
              [&](wire::Header::Builder h) {
                auto prepare = h.initMembershipPrepare();
                prepare.setEpoch(membership_epoch_);
                auto live = prepare.initLiveWorkers(membership_live_.size());
                for (size_t i = 0; i < membership_live_.size(); ++i)
                  live.set(i, membership_live_[i]);
              },
              "the new membership"),
          "sending a membership prepare");
}

Status Coordinator::HandleMembershipPrepared(const transport::PeerId& peer,
                                             wire::MembershipPrepared::Reader prepared) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::PS) return InvalidArgument("membership answer from a non-PS");
  if (!membership_pending_ || prepared.getEpoch() != membership_epoch_) return Status::Ok();
  prepared_[n->rank] = prepared.getMaxVersion();
  if (prepared_.size() < LivePsCount()) return Status::Ok();
  uint64_t step = 0;
  for (const auto& [rank, version] : prepared_) step = std::max(step, version + 1);
  std::string ranks;
  for (int r : membership_live_) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  const bool changed = history_.empty() || history_.back().live != membership_live_;
  if (changed) {
    spdlog::info(
        "membership {}: from step {} the {} live workers ({}) share the rest of each "
        "epoch's data (re-sharded: a lost worker's share included, a joiner takes part)",
        membership_epoch_, step, membership_live_.size(), ranks);
  }
  const uint64_t snapshot_step = snapshot_in_round_.empty() ? 0 : step;
  if (snapshot_step > 0) spdlog::info("snapshot on demand: every PS snapshots step {}", step);
  EEN_RETURN_IF_ERROR(SendToLivePs(
      [&](wire::Header::Builder h) {
        auto commit = h.initMembershipCommit();
        commit.setEpoch(membership_epoch_);
        commit.setEffectiveStep(step);
        auto live = commit.initLiveWorkers(membership_live_.size());
        for (size_t i = 0; i < membership_live_.size(); ++i) live.set(i, membership_live_[i]);
        commit.setSnapshotStep(snapshot_step);
      },
      "the membership commit"));
  membership_pending_ = false;
  for (const transport::PeerId& requester : snapshot_in_round_) {
    wire::Outgoing b;
    b.header().setSnapshotReply(fmt::format(
        "every PS snapshots step {}; the job's log says 'snapshot of step {} complete' once it "
        "is written everywhere",
        step, step));
    Ignored(listener_->Send(requester, b.Take()), "answering a snapshot request");
  }
  snapshot_in_round_.clear();
  if (changed) {
    history_.push_back({step, membership_live_, membership_epoch_});
    SaveHistory();
  }
  for (int r : membership_live_) {
    Node& w = workers_[r];
    if (!w.joining) continue;
    w.joining = false;
    w.join_step = step;
    w.liveness.Restart(Clock::now());
    spdlog::info("worker {} takes part from step {}", r, step);
    EEN_RETURN_IF_ERROR(SendJobStart(w, false, step));
  }
  SaveState();
  if (LiveWorkerRanks() != membership_live_ || !snapshot_waiting_.empty()) {
    StartMembershipChange();  // changed, or asked for, meanwhile
  }
  return Status::Ok();
}

Status Coordinator::HandleSnapshotRequest(const transport::PeerId& peer) {
  auto refuse = [&](const std::string& why) {
    return listener_->Send(
        peer, wire::MakeError(wire::ErrorCode::FAILED_PRECONDITION, "no snapshot: " + why));
  };
  if (state_ != wire::JobState::RUNNING) return refuse("the job is not running");
  if (options_.job.snapshot_every == 0) {
    return refuse("this job keeps no snapshots (start it with --snapshot-every N)");
  }
  if (recovering_) return refuse("a rollback is under way; ask again when it is done");
  snapshot_waiting_.push_back(peer);
  if (!membership_pending_) StartMembershipChange();
  return Status::Ok();
}

std::vector<int> Coordinator::LiveWorkerRanks() const {
  std::vector<int> live;
  for (const Node& w : workers_) {
    if (!w.lost && !w.done) live.push_back(w.rank);
  }
  return live;
}

}  // namespace een
