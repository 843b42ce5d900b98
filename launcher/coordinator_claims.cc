// Coordinator: who may take a rank. A process takes over a rank only once
// its holder is declared lost: on een-launch's word that the process ended
// (at once), or by the holder's silence (the failover threshold). A
// Register alone never pushes a live process out. See coordinator.h.
#include <fmt/format.h>

#include <algorithm>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"
#include "launcher/coordinator_messages.h"

namespace een {

Status Coordinator::HandleProcessGone(const transport::PeerId& peer,
                                      wire::ProcessGone::Reader gone) {
  const int pid = gone.getPid();
  const std::string what = gone.getWhat();
  const std::string host = gone.getHost();  // empty: one host (pids are unique)
  if (pid <= 0) return InvalidArgument("process report without a pid");
  auto is = [&](const Node& n) {
    return n.registered && n.pid == pid && (host.empty() || n.host == host);
  };
  Node* node = nullptr;
  // A worker that said it finished, or a PS once every worker had: its
  // part is done, and nothing is replaced.
  bool finished = false;
  for (std::vector<Node>* nodes : {&ps_, &workers_}) {
    for (Node& n : *nodes) {
      if (is(n) && !n.lost && !n.done) node = &n;
      if (is(n) && n.done && n.role == wire::Role::WORKER) finished = true;
    }
  }
  const bool started = state_ != wire::JobState::STARTING;
  // torch.distributed's een backend: no newcomer can join the others' DDP
  // (it would lack their optimizer state), so een-launch starts every
  // worker again, as torchrun does, while restarts are left.
  const bool restart_all = node && started && node->role == wire::Role::WORKER &&
                           ServesProcessGroups() && options_.job.max_restarts > 0;
  if (restart_all) {
    spdlog::warn("{} {} (seen by een-launch); een-launch starts every worker again",
                 Describe(*node), what);
    return listener_->Send(peer, coordinator_messages::ProcessGoneReply(started, false, true));
  }
  if (node && !started) {
    spdlog::warn("{} {} before the job started; its rank is free for a replacement",
                 Describe(*node), what);
    FreeRank(*node);
  } else if (node && node->role == wire::Role::PS && state_ == wire::JobState::SHUTDOWN) {
    // Training is over (every worker has its parameters): nothing is lost.
    spdlog::info("{} {} after the job finished; nothing is lost", Describe(*node), what);
    node->lost = true;
    finished = true;
    SaveState();
  } else if (node && node->role == wire::Role::PS) {
    PsLost(*node, Describe(*node) + " " + what + " (seen by een-launch)");
  } else if (node) {
    WorkerLost(*node, Describe(*node) + " " + what + " (seen by een-launch)");
  }
  return listener_->Send(peer, coordinator_messages::ProcessGoneReply(started, finished, false));
}

void Coordinator::FreeRank(Node& n) {
  const wire::Role role = n.role;
  const int rank = n.rank;
  n = Node{};
  n.role = role;
  n.rank = rank;
  if (role == wire::Role::WORKER) offered_models_.erase(rank);
}

Status Coordinator::ClaimOfLiveRank(const Node& held, int pid) {
  auto [it, first] = claims_.try_emplace(pid, Clock::now());
  const long waited = MillisSince(it->second);
  const long patience = Liveness::kMaxFactor * options_.job.failover_threshold.count() + 5000;
  if (first) {
    spdlog::info(
        "a process (pid {}) asks for the rank of {}, which is alive: it is admitted "
        "once that one is declared lost (een-launch reports it ended, or it is silent "
        "past the failover threshold, {} ms, or up to 3x that when its heartbeats came "
        "irregularly)",
        pid, Describe(held), options_.job.failover_threshold.count());
  }
  if (waited < patience) return Status::Ok();
  claims_.erase(it);
  return FailedPrecondition(fmt::format(
      "{} rank {} is held by a live process ({}): a second process for one rank is refused. A "
      "replacement is admitted once the holder is declared lost (een-launch reports it ended, "
      "or it is silent past the failover threshold, {} ms, or up to 3x that)",
      RoleName(held.role), held.rank, Describe(held), options_.job.failover_threshold.count()));
}

void Coordinator::PsLost(Node& p, const std::string& why) {
  counters_.failovers++;
  if (!(options_.job.replicas >= 2 && !rollback_.active() && FailOver(p, why))) {
    if (options_.job.snapshot_every == 0) {
      const uint64_t job_step = NewestWorkerStep();
      Abort(fmt::format(
          "{}; the job was at step {}; ending the job ({})", why, job_step,
          options_.job.replicas >= 2
              ? "some of its shards have no live backup"
              : "with --snapshot-every N the job rolls back to its last snapshot instead"));
      return;
    }
    BeginRecovery(p, why);
  }
  // A spare that took its place (ReplacePs) began a pending round again already.
  if (p.lost) PsChanged();
}

}  // namespace een
