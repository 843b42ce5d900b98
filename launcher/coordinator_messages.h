// Every message the coordinator sends, built in one place: one typed
// function per kind, each returning the framed message. The coordinator's
// protocols (coordinator.h and the state machines it drives) decide what
// to say; these only say it.
// Thread safety: free functions; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/shard_map.h"
#include "common/transport/frame.h"
#include "een/membership.h"
#include "een/optimizer.h"
#include "schema/een.capnp.h"

namespace een::coordinator_messages {

using transport::Message;

// What a PS or worker is told when the job starts for it (or starts again:
// a rollback, a joining worker, a replacement PS).
struct JobStartFields {
  int rank = 0;
  int world_size = 0;  // workers, grown by those who joined
  int num_ps = 0;
  const ShardMap* map = nullptr;
  const OptimizerConfig* optimizer = nullptr;
  bool resume = false;  // parameters come from the PS (a snapshot, or the running job)
  uint64_t start_step = 0;
  uint64_t rollback_epoch = 0;
  bool rebuild = false;  // a PS joining a running job: its chunks come as images
  const std::vector<MembershipChange>* history = nullptr;
  std::string consistency = "bsp";
  bool dynamic_slicing = false;
  bool joining = false;     // a worker joining the running job at start_step
  uint64_t data_batch = 0;  // the samplers' batch size (0: not known yet)
};
Message JobStart(const JobStartFields& fields);

// `echo_micros`: the heartbeat's sentMicros (its sender measures the round trip).
// `probe_round`: nonzero while eenctl status --probe waits for the workers.
// `final_step`: every worker finished, and these are the job's final values.
Message HeartbeatReply(uint64_t incarnation, uint64_t map_epoch, wire::JobState state,
                       const std::string& reason, int64_t echo_micros = 0, uint64_t probe_round = 0,
                       std::optional<uint64_t> final_step = std::nullopt);
Message MapChange(const ShardMap& map);
// `lost`: the workers gone that were lost (not finished) and the job goes
// on without.
Message MembershipPrepare(uint64_t epoch, const std::vector<int>& live,
                          const std::vector<int>& lost);
// `snapshot_step`: the step every PS snapshots on demand (0: none).
Message MembershipCommit(const MembershipChange& change, uint64_t snapshot_step);
Message Rollback(uint64_t epoch, uint64_t step);
Message BarrierReply(uint64_t sequence);
Message BatchClaimReply(uint64_t sequence, uint64_t index);
Message DoneReply();
Message ProcessGoneReply(bool job_started, bool finished, bool restart_all);
// An elastic job's share for one node (NodeStatusReply's `assigned` fields).
struct NodeShare {
  bool assigned = false;
  int first_ps = 0, first_worker = 0;
  int num_ps = 0, world_size = 0;
  int nodes_joined = 0;
  std::vector<int> restart_workers;  // lost hosts' worker ranks this node replaces
  std::string torch_store;           // node 0's c10d store, HOST:PORT ("": none)
};
// The coordinator's run of the job, and whether it ended for every worker to start again.
struct JobRun {
  int attempt = 0;
  bool restart_every_worker = false;
};
// To a node's launcher (per-node launch): the job's state, why it was
// aborted, the pids of that node's workers declared lost; `refused`: why
// this launcher is not part of the job; an elastic job's `share` for it.
Message NodeStatusReply(wire::JobState state, const std::string& reason,
                        const std::vector<int>& lost_pids, const std::string& refused,
                        const NodeShare& share = {}, JobRun run = {});
// To eenctl: every PS snapshots `step` into `folder` (absolute); `text` says so.
Message SnapshotTaken(uint64_t step, const std::string& folder, const std::string& text);
Message DrainReply(const std::string& text);

// One process in `eenctl metrics`' answer.
struct ProcessMetrics {
  wire::Role role = wire::Role::WORKER;
  int rank = 0;
  int pid = 0;
  std::string host;
  uint64_t heard_ms_ago = 0;
  bool lost = false;
  bool done = false;
  const std::vector<MetricSample>* metrics = nullptr;
};
Message MetricsReply(const std::vector<ProcessMetrics>& processes);

}  // namespace een::coordinator_messages
