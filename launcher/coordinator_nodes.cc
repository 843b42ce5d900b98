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
             MillisSince(it->second.heard) < 3 * options_.job.failover_threshold.count() + 2000) {
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
  }
  it->second = NodeLauncher{host, pid, Clock::now()};
  const std::string failure = status.getFailure();
  if (!failure.empty() &&
      (state_ == wire::JobState::STARTING || state_ == wire::JobState::RUNNING)) {
    Abort(fmt::format("node {} ({}): {}", node, host, failure));
  }
  std::vector<int> lost_pids;
  for (const Node& w : workers_) {
    if (w.registered && w.lost && w.host == host) lost_pids.push_back(w.pid);
  }
  return listener_->Send(
      peer, coordinator_messages::NodeStatusReply(state_, abort_reason_, lost_pids, ""));
}

}  // namespace een
