// Coordinator: answering `eenctl metrics` with every known process's newest
// metrics (from their heartbeats). See coordinator.h.
#include "common/metrics.h"
#include "common/wire.h"
#include "launcher/coordinator.h"

namespace een {

Status Coordinator::HandleMetricsRequest(const transport::PeerId& peer) {
  const Clock::time_point now = Clock::now();
  std::vector<const Node*> known;
  for (const std::vector<Node>* nodes : {&ps_, &workers_}) {
    for (const Node& n : *nodes) {
      if (n.registered) known.push_back(&n);
    }
  }
  wire::Outgoing b;
  auto report = b.header().initMetricsReply();
  auto list = report.initProcesses(known.size());
  for (size_t i = 0; i < known.size(); ++i) {
    const Node& n = *known[i];
    list[i].setRole(n.role);
    list[i].setRank(n.rank);
    list[i].setPid(n.pid);
    list[i].setHost(n.host);
    list[i].setHeardMsAgo(static_cast<uint64_t>(std::max(0L, n.liveness.SilentMs(now))));
    list[i].setLost(n.lost);
    list[i].setDone(n.done);
    Metrics::ToWire(n.metrics, list[i].initMetrics(n.metrics.size()));
  }
  return listener_->Send(peer, b.Take());
}

}  // namespace een
