// Coordinator: the launchers of a per-node launch (een-launch --nnodes N
// --node-rank R --rdzv HOST:PORT). Each asks how the job stands; its first
// answer is the rendezvous. See coordinator.h.
#include <fmt/format.h>

#include "common/logging.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"
#include "launcher/coordinator_messages.h"

namespace een {

Status Coordinator::HandleNodeStatus(const transport::PeerId& peer,
                                     wire::NodeStatus::Reader status) {
  const int node = status.getNode();
  const int64_t nnodes = status.getNnodes();
  const int ps = status.getPs();
  const int workers = status.getWorkers();
  const std::string host = status.getHost();
  const int pid = status.getPid();
  std::string refused;
  if (nnodes < 1 || node < 0 || node >= nnodes) {
    refused = fmt::format("node rank {} of {} nodes is not a node", node, nnodes);
  } else if (ps != options_.job.ps || workers != options_.job.workers) {
    refused = fmt::format(
        "node {} was started for a job of {} PS and {} workers, but this job has {} PS and {} "
        "workers: start every node's een-launch with the same --nnodes and counts",
        node, ps, workers, options_.job.ps, options_.job.workers);
  } else if (auto it = node_launchers_.find(node);
             it != node_launchers_.end() && (it->second.pid != pid || it->second.host != host) &&
             !LauncherSilent(it->second)) {
    refused = fmt::format(
        "node rank {} is taken by the een-launch on {} (pid {}), which is alive: give each "
        "node its own --node-rank",
        node, it->second.host, it->second.pid);
  }
  if (!refused.empty()) {
    spdlog::warn("refused the een-launch on {} (pid {}): {}", host, pid, refused);
    return listener_->Send(peer, coordinator_messages::NodeStatusReply(state_, "", {}, refused));
  }
  auto [it, first] = node_launchers_.try_emplace(node);
  if (first || it->second.pid != pid || it->second.host != host) {
    spdlog::info("node {} ({}, een-launch pid {}) joined the rendezvous", node, host, pid);
    // Its predecessor's roles died with it (they die with their launcher).
    if (!first) ForgetRolesOf(it->second.host);
  }
  it->second = NodeLauncher{host, pid, Clock::now()};
  const std::string failure = status.getFailure();
  if (!failure.empty() &&
      (state_ == wire::JobState::STARTING || state_ == wire::JobState::RUNNING)) {
    Abort(fmt::format("node {} ({}): {}", node, host, failure));
  }
  it->second.told_end = state_ == wire::JobState::SHUTDOWN || state_ == wire::JobState::ABORTED;
  std::vector<int> lost_pids;
  for (const Node& w : workers_) {
    if (w.registered && w.lost && w.host == host) lost_pids.push_back(w.pid);
  }
  return listener_->Send(
      peer, coordinator_messages::NodeStatusReply(state_, abort_reason_, lost_pids, ""));
}

bool Coordinator::LauncherSilent(const NodeLauncher& launcher) const {
  // It asks every heartbeat interval.
  return MillisSince(launcher.heard) > 5 * options_.job.heartbeat_interval.count() + 500;
}

bool Coordinator::LaunchersTold() const {
  for (const auto& [node, launcher] : node_launchers_) {
    if (!launcher.told_end && !LauncherSilent(launcher)) return false;
  }
  return true;
}

void Coordinator::ForgetRolesOf(const std::string& host) {
  if (state_ != wire::JobState::STARTING) return;  // once started, liveness says who is lost
  for (auto* nodes : {&ps_, &workers_}) {
    for (Node& n : *nodes) {
      if (!n.registered || n.host != host) continue;
      spdlog::warn(
          "{} is gone with its node's een-launch before the job started; its rank is "
          "free for a replacement",
          Describe(n));
      FreeRank(n);
    }
  }
}

void Coordinator::ForgetSilentNodesBeforeStart() {
  for (auto& [node, launcher] : node_launchers_) {
    if (launcher.forgotten || !LauncherSilent(launcher)) continue;
    spdlog::warn("the een-launch of node {} ({}, pid {}) went silent before the job started", node,
                 launcher.host, launcher.pid);
    launcher.forgotten = true;
    ForgetRolesOf(launcher.host);
  }
}

}  // namespace een
