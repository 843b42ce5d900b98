// Coordinator: answering `eenctl metrics` with every known process's newest
// metrics (from their heartbeats). See coordinator.h.
#include "common/metrics.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_messages.h"

namespace een {

Status Coordinator::HandleMetricsRequest(const transport::PeerId& peer) {
  const Clock::time_point now = Clock::now();
  std::vector<coordinator_messages::ProcessMetrics> known;
  for (const std::vector<Node>* nodes : {&ps_, &workers_}) {
    for (const Node& n : *nodes) {
      if (!n.registered) continue;
      known.push_back(
          {.role = n.role,
           .rank = n.rank,
           .pid = n.pid,
           .host = n.host,
           .heard_ms_ago = static_cast<uint64_t>(std::max(0L, n.liveness.SilentMs(now))),
           .lost = n.lost,
           .done = n.done,
           .metrics = &n.metrics});
    }
  }
  return listener_->Send(peer, coordinator_messages::MetricsReply(known));
}

}  // namespace een
