// The PS's messages: see ps_messages.h.
#include "ps/ps_messages.h"

#include "common/wire.h"

namespace een::ps_messages {

namespace {

template <typename T, typename List>
void SetAll(List list, const std::vector<T>& values) {
  for (size_t i = 0; i < values.size(); ++i) list.set(i, values[i]);
}

}  // namespace

Message Register(int rank, const std::string& host, int pid, const std::string& data_address,
                 const std::string& local_address, bool spare, const SnapshotsFound& snapshots) {
  wire::Outgoing b(wire::Role::PS, rank);
  auto reg = b.header().initRegister();
  reg.setRole(wire::Role::PS);
  reg.setRank(rank);
  reg.setHost(host);
  reg.setPid(pid);
  reg.setDataAddress(data_address);
  reg.setLocalAddress(local_address);
  reg.setSpare(spare);
  SetAll(reg.initSnapshotSteps(snapshots.intact.size()), snapshots.intact);
  reg.setSnapshotProblem(snapshots.problem);
  reg.setSnapshotFolderEmpty(snapshots.none);
  SetAll(reg.initEarlierSnapshots(snapshots.earlier.size()), snapshots.earlier);
  return b.Take();
}

Message Hello(int rank) {
  wire::Outgoing b(wire::Role::PS, rank);
  b.header().setHello();
  return b.Take();
}

Message ProbeReply(int rank, uint64_t round, int worker) {
  wire::Outgoing b(wire::Role::PS, rank);
  auto reply = b.header().initProbeReply();
  reply.setRound(round);
  reply.setWorker(worker);
  return b.Take();
}

Message Leave(int rank) {
  wire::Outgoing b(wire::Role::PS, rank);
  b.header().setLeave();
  return b.Take();
}

Message Fault(int rank, const std::string& reason) {
  wire::Outgoing b(wire::Role::PS, rank);
  b.header().setPsFault(reason);
  return b.Take();
}

Message MembershipPrepared(int rank, uint64_t epoch, uint64_t max_version,
                           const std::vector<UnfinishedSteps>& unfinished) {
  wire::Outgoing b(wire::Role::PS, rank);
  auto prepared = b.header().initMembershipPrepared();
  prepared.setEpoch(epoch);
  prepared.setMaxVersion(max_version);
  wire::UnfinishedToWire(unfinished, prepared.initUnfinished(unfinished.size()));
  return b.Take();
}

Message RolledBack(int rank, uint64_t epoch, uint64_t step) {
  wire::Outgoing b(wire::Role::PS, rank);
  auto done = b.header().initRolledBack();
  done.setEpoch(epoch);
  done.setStep(step);
  return b.Take();
}

Message PullReply(const PullReplyFields& f, const std::vector<uint32_t>& chunks,
                  std::vector<Frame> payload) {
  wire::Outgoing b;
  auto reply = b.header().initPullReply();
  reply.setRequestId(f.request_id);
  reply.setDtype(f.dtype);
  SetAll(reply.initChunks(chunks.size()), chunks);
  reply.setVersion(f.version);
  auto membership = reply.initMembership();
  membership.setEpoch(f.membership_epoch);
  membership.setEffectiveStep(f.membership_step);
  membership.setDataStep(f.membership_data_step);
  SetAll(membership.initLiveWorkers(f.live_workers->size()), *f.live_workers);
  if (f.batch_shares && !f.batch_shares->empty()) {
    SetAll(membership.initBatchShares(f.batch_shares->size()), *f.batch_shares);
  }
  if (f.unfinished && !f.unfinished->empty()) {
    wire::UnfinishedToWire(*f.unfinished, membership.initUnfinished(f.unfinished->size()));
  }
  reply.setSlowest(f.slowest);
  reply.setOwnSteps(f.own_steps);
  if (f.versions) SetAll(reply.initVersions(f.versions->size()), *f.versions);
  reply.setStateSlots(f.state_slots);
  return b.Take(std::move(payload));
}

Message NormReply(int rank, const NormReplyFields& f, const std::vector<uint32_t>& chunks,
                  const std::vector<double>& sum_squares) {
  wire::Outgoing b(wire::Role::PS, rank);
  auto reply = b.header().initNormReply();
  reply.setRequestId(f.request_id);
  reply.setStep(f.step);
  reply.setApplied(f.applied);
  reply.setTotalNorm(f.total_norm);
  SetAll(reply.initChunks(chunks.size()), chunks);
  SetAll(reply.initSumSquares(sum_squares.size()), sum_squares);
  return b.Take();
}

Message Replicate(const ReplicateFields& f, const std::vector<uint32_t>& chunks,
                  const std::vector<uint64_t>& versions, const std::vector<double>& lrs,
                  const std::vector<double>& norms, std::vector<Frame> payload,
                  const std::vector<int32_t>& workers, const std::vector<uint64_t>& worker_steps) {
  wire::Outgoing b;
  auto header = b.header();
  auto r = f.answer ? header.initReplicated() : header.initReplicate();
  r.setEpoch(f.epoch);
  r.setFrom(f.from);
  r.setImage(f.image);
  SetAll(r.initChunks(chunks.size()), chunks);
  SetAll(r.initVersions(versions.size()), versions);
  SetAll(r.initLrs(lrs.size()), lrs);
  SetAll(r.initNorms(norms.size()), norms);
  SetAll(r.initWorkers(workers.size()), workers);
  SetAll(r.initWorkerSteps(worker_steps.size()), worker_steps);
  return b.Take(std::move(payload));
}

Message ReduceReply(int rank, uint32_t group, uint64_t seq, uint64_t offset,
                    const std::string& error, const Frame& result,
                    const std::vector<int32_t>& absent) {
  wire::Outgoing b(wire::Role::PS, rank);
  auto reply = b.header().initReduceReply();
  reply.setGroup(group);
  reply.setSeq(seq);
  reply.setOffset(offset);
  SetAll(reply.initAbsent(absent.size()), absent);
  std::vector<Frame> payload;
  if (!error.empty()) {
    reply.setError(error);
  } else {
    payload.push_back(result);
  }
  return b.Take(std::move(payload));
}

}  // namespace een::ps_messages
