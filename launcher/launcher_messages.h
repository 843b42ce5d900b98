// Every message een-launch sends the coordinator, built in one place: one
// typed function per kind, each returning the framed message (as
// coordinator_messages.h does for the coordinator). `host`: the node's
// name in a per-node launch (pids repeat across hosts), "" on one host.
// Thread safety: free functions; no shared state.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/transport/frame.h"
#include "launcher/process_sighting.h"

namespace een::launcher_messages {

using transport::Message;

// A role een-launch started ended (`what`: "was killed by SIGKILL"); a
// replacement is about to start. Answered (ProcessGoneReply).
Message ProcessGone(int pid, const std::string& what, const std::string& host);
// A worker process ended; `status` 0: it left like a finished one.
Message WorkerExited(int rank, int pid, int status, const std::string& host);

// Per-node launch: a node's een-launch asks how the job stands, or ends it
// for `failure` (non-empty). Answered (NodeStatusReply).
struct NodeStatusFields {
  int node = 0;
  int nnodes = 1;
  int ps = 0;  // the job's, as this launcher was told
  int workers = 0;
  std::string host;
  int pid = 0;
  int min_nodes = 0;     // elastic: MIN (nnodes: MAX; ps, workers: per node); 0: fixed
  std::string settings;  // the job-wide flags (JobWideSettings)
  int attempt = 0;       // the job's restarts before this run (TORCHELASTIC_RESTART_COUNT)
};
// `sightings`: this node's roles (pid and what its /proc says of them).
// `restart`, with a failure: every node starts every worker again (--max-restarts).
Message NodeStatus(const NodeStatusFields& fields, const std::string& failure,
                   const std::vector<std::pair<int, ProcessSighting>>& sightings = {},
                   bool restart = false);

}  // namespace een::launcher_messages
