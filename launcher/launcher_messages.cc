#include "launcher/launcher_messages.h"

#include "common/wire.h"

namespace een::launcher_messages {

Message ProcessGone(int pid, const std::string& what, const std::string& host) {
  wire::Outgoing b;
  auto gone = b.header().initProcessGone();
  gone.setPid(pid);
  gone.setWhat(what);
  if (!host.empty()) gone.setHost(host);
  return b.Take();
}

Message WorkerExited(int rank, int pid, int status, const std::string& host) {
  wire::Outgoing b;
  auto exit = b.header().initWorkerExited();
  exit.setRank(rank);
  exit.setPid(pid);
  exit.setStatus(status);
  if (!host.empty()) exit.setHost(host);
  return b.Take();
}

Message NodeStatus(const NodeStatusFields& fields, const std::string& failure,
                   const std::vector<std::pair<int, ProcessSighting>>& sightings, bool restart) {
  wire::Outgoing b;
  auto s = b.header().initNodeStatus();
  s.setNode(fields.node);
  s.setNnodes(fields.nnodes);
  s.setPs(fields.ps);
  s.setWorkers(fields.workers);
  s.setHost(fields.host);
  s.setPid(fields.pid);
  s.setMinNodes(fields.min_nodes);
  s.setSettings(fields.settings);
  s.setFailure(failure);
  s.setAttempt(fields.attempt);
  s.setRestart(restart);
  auto list = s.initSightings(sightings.size());
  for (size_t i = 0; i < sightings.size(); ++i) {
    list[i].setPid(sightings[i].first);
    // ProcessSighting::State and wire::ProcessState list the states alike.
    list[i].setState(static_cast<wire::ProcessState>(sightings[i].second.state));
    list[i].setCpuNanos(sightings[i].second.cpu);
  }
  return b.Take();
}

}  // namespace een::launcher_messages
