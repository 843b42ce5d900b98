// Coordinator: which workers train: a lost worker drops out, a replacement
// or a new worker joins, at a step agreed with every PS. See coordinator.h.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"
#include "launcher/coordinator_messages.h"

namespace een {

using transport::Message;

Status Coordinator::AcceptReplacementWorker(const transport::PeerId& peer,
                                            wire::Register::Reader reg) {
  const int rank = reg.getRank();
  if (rank >= static_cast<int>(workers_.size()) && rank < next_late_worker_ &&
      (rank > static_cast<int>(workers_.size()) || moves_.active() ||
       static_cast<int>(ps_.size()) < next_late_ps_)) {
    // A late node's worker (elastic) joins once its node's PS have (shards
    // move first, then the membership changes), and after the workers
    // ranked before it; it registers again every second until then.
    return Status::Ok();
  }
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
    if (membership_.pending() || membership_.interrupted()) return Status::Ok();  // at the commit
    const std::vector<MembershipChange>& history = membership_.history();
    const auto& last = history.empty() ? std::vector<int>() : history.back().live;
    if (std::find(last.begin(), last.end(), rank) != last.end()) {
      w.joining = false;  // agreed already
      return SendJobStart(w, false, history.back().step);
    }
    StartMembershipChange();
    return Status::Ok();
  }
  // A replacement, once the one it replaces is declared lost.
  if (!w.lost) return ClaimOfLiveRank(w, reg.getPid());
  claims_.erase(reg.getPid());
  w.Take({peer, reg.getHost(), reg.getPid(), ""}, Clock::now());
  w.lost = false;
  w.joining = true;
  if (!grows) worker_replacements_++;
  spdlog::info("{} joins the running job{}: it trains from the step every PS agrees on",
               Describe(w),
               grows ? fmt::format(" as a new worker ({} in all)", workers_.size()) : "");
  RecordJoined(w);
  WantMembershipChange();
  SaveState();
  return Status::Ok();
}

void Coordinator::RecordJoined(const Node& w) {
  if (!options_.joined_path.empty()) {  // een-launch stops a replacement that never joined
    std::ofstream(options_.joined_path, std::ios::app) << w.rank << ' ' << w.pid << '\n';
  }
}

void Coordinator::WorkerLost(Node& w, const std::string& what) {
  w.lost = true;
  counters_.workers_lost++;
  if (!options_.lost_path.empty()) {  // een-launch stops it if it still runs at the end
    std::ofstream(options_.lost_path, std::ios::app) << w.rank << ' ' << w.pid << '\n';
  }
  const std::vector<int> live = LiveWorkerRanks();
  if (ServesProcessGroups() && options_.job.max_restarts > 0) {
    // No newcomer can join torch's groups: een-launch restarts every worker, when it sees one
    // end (HandleProcessGone) or, for one lost by its silence (stopped, cut off), when this
    // coordinator ends with kCoordinatorExitRestartEveryWorker.
    restart_every_worker_ = true;
    Abort(fmt::format(
        "{}; a job of torch.distributed's een backend takes no replacement of one worker: ending "
        "it, for een-launch to start every worker again while --max-restarts allows "
        "(--min-workers lets the job go on without it)",
        what));
    return;
  }
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
  spdlog::warn("{}; the job goes on with {} workers (--min-workers {}{}){}", what, live.size(),
               options_.job.MinWorkers(),
               restarts_left > 0 ? fmt::format(", {} replacement(s) left", restarts_left) : "",
               ServesProcessGroups()
                   ? "; its collectives complete over the others (float sums scaled by "
                     "world / live, so DDP's mean stays the survivors' mean)"
                   : "");
  ReleaseBarriers();
  WantMembershipChange();
  MaybeFinish();
  SaveState();
}

void Coordinator::StartMembershipChange(std::optional<std::vector<uint32_t>> shares) {
  snapshots_.BeginRound();  // a round also serves the snapshot requests waiting so far
  const std::vector<int> live = LiveWorkerRanks();
  if (!shares) {
    // Other workers: equal shares until their speeds are measured again.
    if (membership_.Outdated(live)) {
      shares.emplace();
      slices_.Changed();
    } else {
      shares = membership_.shares();
    }
  }
  const MembershipRound::Prepare prepare = membership_.Begin(live, std::move(*shares));
  std::vector<int> lost;
  for (const Node& w : workers_) {
    if (w.lost) lost.push_back(w.rank);
  }
  Ignored(SendToPs(
              ServingPs(),
              [&] {
                return coordinator_messages::MembershipPrepare(prepare.epoch, prepare.live, lost);
              },
              "the new membership"),
          "sending a membership prepare");
}

void Coordinator::MaybeReslice() {
  if (state_ != wire::JobState::RUNNING) return;
  const std::vector<int> live = LiveWorkerRanks();
  // Misuse: slices that overlap or leave samples out, every step.
  // (Longer than the heartbeats' lag after a change of the live workers.)
  const Clock::duration patience =
      std::max<Clock::duration>(std::chrono::seconds(2), 5 * options_.job.heartbeat_interval);
  if (auto what = slices_.Disagreement(live, Clock::now(), patience)) {
    Abort(fmt::format(
        "--dynamic-slicing: the workers ask batch_slice() for slices of different global "
        "batches ({}), so their samples overlap or are left out: every worker must pass the "
        "same per-worker batch b (the global batch is live_count() * b)",
        *what));
    return;
  }
  if (!warned_unsliced_) {
    if (std::vector<int> never = slices_.NeverSliced(live, 20); !never.empty()) {
      spdlog::warn(
          "--dynamic-slicing auto is on, but worker(s) {} never called batch_slice(): their "
          "batches are not sliced and the shares stay equal (take each step's slice with "
          "dp.batch_slice(b) and DistributedSampler::Slice, see docs/user-guide.md)",
          fmt::join(never, ","));
      warned_unsliced_ = true;
    }
  }
  if (membership_.pending() || membership_.interrupted() || rollback_.active()) return;
  if (membership_.Outdated(live)) return;  // the change of the live workers comes first
  // After a rollback the job redoes steps under the shares it had then:
  // new shares only once it is past the newest change again (every PS and
  // worker looks shares up by step, in ascending order).
  if (!membership_.history().empty() && NewestWorkerStep() <= membership_.history().back().step) {
    return;
  }
  std::optional<std::vector<uint32_t>> shares = slices_.Propose(live, membership_.shares());
  if (!shares) return;
  spdlog::info("dynamic slicing: {}: new shares {} of each global batch", slices_.Describe(live),
               fmt::join(*shares, ","));
  slices_.Changed();
  StartMembershipChange(std::move(shares));
}

uint32_t Coordinator::ShareOf(int rank) const {
  const std::vector<int> live = LiveWorkerRanks();
  if (membership_.shares().size() != live.size() || membership_.Outdated(live)) return 0;
  for (size_t i = 0; i < live.size(); ++i) {
    if (live[i] == rank) return membership_.shares()[i];
  }
  return 0;
}

void Coordinator::PsChanged() {
  if (state_ != wire::JobState::RUNNING || !membership_.pending()) return;
  spdlog::info("membership {} began again: the PS changed while it waited for their answers",
               membership_.epoch());
  StartMembershipChange();
}

void Coordinator::WantMembershipChange() {
  if (!membership_.pending()) StartMembershipChange();  // else: right after the pending one
}

Status Coordinator::HandleMembershipPrepared(const transport::PeerId& peer,
                                             wire::MembershipPrepared::Reader prepared) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::PS) return InvalidArgument("membership answer from a non-PS");
  if (prepared.getUnfinished().size() > workers_.size()) {
    return InvalidArgument("membership answer names more lost workers than the job has");
  }
  const std::vector<UnfinishedSteps> unfinished =
      wire::UnfinishedFromWire(prepared.getUnfinished());
  for (const UnfinishedSteps& u : unfinished) {
    if (u.worker < 0 || static_cast<size_t>(u.worker) >= workers_.size()) {
      return InvalidArgument("membership answer names an unknown worker");
    }
  }
  // bsp: the data's layout changes past what the workers' loops drew already.
  const uint64_t look_ahead = consistency_.per_arrival() ? 0 : data_look_ahead_;
  const std::optional<MembershipRound::Commit> commit = membership_.Prepared(
      n->rank, prepared.getEpoch(), prepared.getMaxVersion(), ServingPs(), unfinished, look_ahead);
  if (!commit) return Status::Ok();  // more answers to come, or not this round's
  const uint64_t step = commit->step;
  for (const UnfinishedSteps& u : commit->unfinished) {
    if (consistency_.per_arrival()) {  // its own steps: each worker takes its own
      const size_t again = DealAgain(u.worker, u.from_step);
      spdlog::info(
          "worker {}'s batches of steps {}-{} were not trained (lost before its gradients "
          "arrived everywhere): {}",
          u.worker, u.from_step, u.from_step + std::max<size_t>(again, 1) - 1,
          again == 0 ? std::string("it had been dealt none of them yet")
                     : fmt::format("NextBatch() deals those {} batch(es) again first", again));
      continue;
    }
    const uint64_t data_step = std::max(step, commit->data_step);
    const std::string why =
        u.from_step < step ? "lost before its gradients arrived" : "it left the job";
    spdlog::info(
        "worker {}'s batches of steps {}-{} were not trained ({}{}): the live workers' "
        "samplers draw them first",
        u.worker, u.from_step, data_step - 1, why,
        data_step > step ? fmt::format("; from step {} the others' loaders had drawn theirs "
                                       "ahead in the old layout",
                                       std::max(step, u.from_step))
                         : "");
  }
  if (commit->changed && !commit->shares.empty() && !commit->live.empty() &&
      membership_.history().back().live == commit->live) {
    spdlog::info(
        "membership {}: from step {} the workers ({}) train {} samples of each global "
        "batch of {} (dynamic slicing)",
        commit->epoch, step, fmt::join(commit->live, ","), fmt::join(commit->shares, ","),
        std::accumulate(commit->shares.begin(), commit->shares.end(), uint64_t{0}));
  } else if (commit->changed && ServesProcessGroups()) {
    spdlog::info("membership {}: the live workers are ({})", commit->epoch,
                 fmt::join(commit->live, ","));
  } else if (commit->changed) {
    std::string ranks;
    for (int r : commit->live) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    const std::vector<int>& before = membership_.history().back().live;
    const bool left = std::any_of(before.begin(), before.end(), [&](int w) {
      return std::find(commit->live.begin(), commit->live.end(), w) == commit->live.end();
    });
    const bool joined = std::any_of(commit->live.begin(), commit->live.end(), [&](int w) {
      return std::find(before.begin(), before.end(), w) == before.end();
    });
    const char* how = left && joined ? "a lost worker's share included, a joiner takes part"
                      : left         ? "a lost worker's share included"
                                     : "the joiner takes part";
    spdlog::info(
        "membership {}: from step {} the {} live workers ({}) share the rest of each "
        "epoch's data{} (re-sharded: {})",
        commit->epoch, step, commit->live.size(), ranks,
        commit->data_step > step ? fmt::format(" from step {}", commit->data_step) : "", how);
  }
  // An on-demand snapshot: of the step the PS stopped at (a join may take effect later).
  const uint64_t snapshot_step = snapshots_.StepFor(commit->frozen_at);
  if (snapshot_step > 0) {
    spdlog::info("snapshot on demand: every PS snapshots step {}", commit->frozen_at);
  }
  EEN_RETURN_IF_ERROR(SendToPs(
      ServingPs(),
      [&] {
        return coordinator_messages::MembershipCommit(
            {step, commit->live, commit->epoch, commit->shares, commit->unfinished,
             commit->data_step},
            snapshot_step);
      },
      "the membership commit"));
  // New batch shares alone (--dynamic-slicing) are no change of who trains.
  const bool reslice = commit->changed && !membership_.history().empty() &&
                       membership_.history().back().live == commit->live;
  membership_.Committed(*commit);
  if (!reslice) counters_.membership_changes++;
  std::error_code ec;
  const std::string folder = std::filesystem::absolute(options_.snapshot_dir, ec).string();
  for (const transport::PeerId& requester : snapshots_.Served()) {
    const uint64_t at = commit->frozen_at;
    Ignored(listener_->Send(requester, coordinator_messages::SnapshotTaken(
                                           at, folder,
                                           fmt::format("every PS snapshots step {} into {}; the "
                                                       "job's log says 'snapshot of step {} "
                                                       "complete' once it is written everywhere",
                                                       at, folder, at))),
            "answering a snapshot request");
  }
  if (commit->changed) SaveHistory();
  for (int r : commit->live) {
    Node& w = workers_[r];
    if (!w.joining) continue;
    w.joining = false;
    w.join_step = step;
    w.liveness.Restart(Clock::now());
    spdlog::info("worker {} takes part from step {}", r, step);
    EEN_RETURN_IF_ERROR(SendJobStart(w, false, step));
  }
  SaveState();
  if (membership_.Outdated(LiveWorkerRanks()) || snapshots_.asked()) {
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
  if (rollback_.active()) return refuse("a rollback is under way; ask again when it is done");
  snapshots_.Ask(peer);
  WantMembershipChange();
  return Status::Ok();
}

uint64_t Coordinator::NewestWorkerStep() const {
  uint64_t step = 0;
  for (const Node& w : workers_) step = std::max(step, w.step);
  return step;
}

std::vector<int> Coordinator::LiveWorkerRanks() const {
  std::vector<int> live;
  for (const Node& w : workers_) {
    if (!w.lost && !w.done) live.push_back(w.rank);
  }
  return live;
}

}  // namespace een
