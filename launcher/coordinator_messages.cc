// The coordinator's messages: see coordinator_messages.h.
#include "launcher/coordinator_messages.h"

#include "common/flight_recorder.h"
#include "common/optimizer_wire.h"
#include "common/wire.h"

namespace een::coordinator_messages {

namespace {

void SetWorkers(capnp::List<int32_t>::Builder list, const std::vector<int>& ranks) {
  for (size_t i = 0; i < ranks.size(); ++i) list.set(i, ranks[i]);
}

}  // namespace

Message JobStart(const JobStartFields& f) {
  wire::Outgoing b;
  auto js = b.header().initJobStart();
  js.setRank(f.rank);
  js.setWorldSize(f.world_size);
  js.setNumPs(f.num_ps);
  f.map->ToWire(js.initMap());
  OptimizerToWire(*f.optimizer, js.initOptimizer());
  js.setResume(f.resume);
  js.setStartStep(f.start_step);
  js.setRollbackEpoch(f.rollback_epoch);
  js.setRebuild(f.rebuild);
  js.setConsistency(f.consistency);
  js.setDynamicSlicing(f.dynamic_slicing);
  js.setJoining(f.joining);
  js.setDataBatch(f.data_batch);
  auto history = js.initHistory(f.history->size());
  for (size_t k = 0; k < f.history->size(); ++k) {
    wire::MembershipToWire((*f.history)[k], history[k]);
  }
  return b.Take();
}

Message HeartbeatReply(uint64_t incarnation, uint64_t map_epoch, wire::JobState state,
                       const std::string& reason, int64_t echo_micros, uint64_t probe_round,
                       std::optional<uint64_t> final_step) {
  wire::Outgoing b;
  auto reply = b.header().initHeartbeatReply();
  reply.setIncarnation(incarnation);
  reply.setMapEpoch(map_epoch);
  reply.setState(state);
  reply.setReason(reason);
  reply.setCoordinatorMicros(FlightRecorder::Micros(std::chrono::steady_clock::now()));
  reply.setEchoMicros(echo_micros);
  reply.setProbeRound(probe_round);
  if (final_step) {
    reply.setFinalReady(true);
    reply.setFinalStep(*final_step);
  }
  return b.Take();
}

Message MapChange(const ShardMap& map) {
  wire::Outgoing b;
  map.ToWire(b.header().initMapChange());
  return b.Take();
}

Message MembershipPrepare(uint64_t epoch, const std::vector<int>& live,
                          const std::vector<int>& lost) {
  wire::Outgoing b;
  auto prepare = b.header().initMembershipPrepare();
  prepare.setEpoch(epoch);
  SetWorkers(prepare.initLiveWorkers(live.size()), live);
  SetWorkers(prepare.initLostWorkers(lost.size()), lost);
  return b.Take();
}

Message MembershipCommit(const MembershipChange& change, uint64_t snapshot_step) {
  wire::Outgoing b;
  auto commit = b.header().initMembershipCommit();
  wire::MembershipToWire(change, commit);
  commit.setSnapshotStep(snapshot_step);
  return b.Take();
}

Message Rollback(uint64_t epoch, uint64_t step) {
  wire::Outgoing b;
  auto rollback = b.header().initRollback();
  rollback.setEpoch(epoch);
  rollback.setStep(step);
  return b.Take();
}

Message BatchClaimReply(uint64_t sequence, uint64_t index) {
  wire::Outgoing b;
  auto reply = b.header().initBatchClaimReply();
  reply.setSequence(sequence);
  reply.setIndex(index);
  return b.Take();
}

Message BarrierReply(uint64_t sequence) {
  wire::Outgoing b;
  b.header().initBarrierReply().setSequence(sequence);
  return b.Take();
}

Message DoneReply() {
  wire::Outgoing b;
  b.header().setDoneReply();
  return b.Take();
}

Message ProcessGoneReply(bool job_started, bool finished, bool restart_all) {
  wire::Outgoing b;
  auto reply = b.header().initProcessGoneReply();
  reply.setJobStarted(job_started);
  reply.setFinished(finished);
  reply.setRestartAll(restart_all);
  return b.Take();
}

Message NodeStatusReply(wire::JobState state, const std::string& reason,
                        const std::vector<int>& lost_pids, const std::string& refused,
                        const NodeShare& share, JobRun run) {
  wire::Outgoing b;
  auto r = b.header().initNodeStatusReply();
  r.setState(state);
  r.setReason(reason);
  auto lost = r.initLostPids(static_cast<unsigned>(lost_pids.size()));
  for (size_t i = 0; i < lost_pids.size(); ++i) lost.set(static_cast<unsigned>(i), lost_pids[i]);
  r.setRefused(refused);
  r.setAssigned(share.assigned);
  r.setFirstPs(share.first_ps);
  r.setFirstWorker(share.first_worker);
  r.setNumPs(share.num_ps);
  r.setWorldSize(share.world_size);
  r.setNodesJoined(share.nodes_joined);
  r.setTorchStore(share.torch_store);
  r.setAttempt(run.attempt);
  r.setRestartEveryWorker(run.restart_every_worker);
  auto restart = r.initRestartWorkers(static_cast<unsigned>(share.restart_workers.size()));
  for (size_t i = 0; i < share.restart_workers.size(); ++i) {
    restart.set(static_cast<unsigned>(i), share.restart_workers[i]);
  }
  return b.Take();
}

Message SnapshotTaken(uint64_t step, const std::string& folder, const std::string& text) {
  wire::Outgoing b;
  auto taken = b.header().initSnapshotTaken();
  taken.setStep(step);
  taken.setFolder(folder);
  taken.setText(text);
  return b.Take();
}

Message DrainReply(const std::string& text) {
  wire::Outgoing b;
  b.header().setDrainReply(text);
  return b.Take();
}

Message MetricsReply(const std::vector<ProcessMetrics>& processes) {
  wire::Outgoing b;
  auto list = b.header().initMetricsReply().initProcesses(processes.size());
  for (size_t i = 0; i < processes.size(); ++i) {
    const ProcessMetrics& p = processes[i];
    list[i].setRole(p.role);
    list[i].setRank(p.rank);
    list[i].setPid(p.pid);
    list[i].setHost(p.host);
    list[i].setHeardMsAgo(p.heard_ms_ago);
    list[i].setLost(p.lost);
    list[i].setDone(p.done);
    Metrics::ToWire(*p.metrics, list[i].initMetrics(p.metrics->size()));
  }
  return b.Take();
}

}  // namespace een::coordinator_messages
