// The worker's messages: see worker_messages.h.
#include "worker/worker_messages.h"

#include "common/optimizer_wire.h"
#include "common/wire.h"

namespace een::worker_messages {

namespace {

void SetChunks(capnp::List<uint32_t>::Builder list, const std::vector<uint32_t>& chunks) {
  for (size_t k = 0; k < chunks.size(); ++k) list.set(k, chunks[k]);
}

}  // namespace

Message Register(int rank, const std::string& host, int pid, const std::vector<TensorInfo>& tensors,
                 const OptimizerConfig& optimizer) {
  wire::Outgoing b(wire::Role::WORKER, rank);
  auto reg = b.header().initRegister();
  reg.setRole(wire::Role::WORKER);
  reg.setRank(rank);
  reg.setHost(host);
  reg.setPid(pid);
  TensorsToWire(tensors, reg.initTensors(tensors.size()));
  OptimizerToWire(optimizer, reg.initOptimizer());
  return b.Take();
}

Message MapRequest(int rank) {
  wire::Outgoing b(wire::Role::WORKER, rank);
  b.header().setMapRequest();
  return b.Take();
}

Message Barrier(int rank, uint64_t sequence, uint64_t map_epoch) {
  wire::Outgoing b(wire::Role::WORKER, rank);
  auto barrier = b.header().initBarrier();
  barrier.setSequence(sequence);
  barrier.setMapEpoch(map_epoch);
  return b.Take();
}

Message BatchClaim(int rank, uint64_t sequence, uint64_t step, uint64_t not_before) {
  wire::Outgoing b(wire::Role::WORKER, rank);
  auto claim = b.header().initBatchClaim();
  claim.setSequence(sequence);
  claim.setStep(step);
  claim.setNotBefore(not_before);
  return b.Take();
}

Message Done(int rank, uint64_t steps) {
  wire::Outgoing b(wire::Role::WORKER, rank);
  b.header().setDone(steps);
  return b.Take();
}

Message AwaitFinal(int rank, uint64_t steps) {
  wire::Outgoing b(wire::Role::WORKER, rank);
  b.header().setAwaitFinal(steps);
  return b.Take();
}

Message FinalTaken(int rank) {
  wire::Outgoing b(wire::Role::WORKER, rank);
  b.header().setFinalTaken();
  return b.Take();
}

Message Probe(int worker, uint64_t round, size_t bytes) {
  wire::Outgoing b(wire::Role::WORKER, worker);
  auto probe = b.header().initProbe();
  probe.setRound(round);
  probe.setWorker(worker);
  std::vector<Frame> payload;
  payload.push_back(Frame::Own(std::vector<std::byte>(bytes)));
  return b.Take(std::move(payload));
}

Message Push(const PushFields& f, const std::vector<uint32_t>& chunks, std::vector<Frame> payload) {
  wire::Outgoing b;
  auto push = b.header().initPush();
  push.setAgain(f.again);
  push.setEpoch(f.epoch);
  push.setStep(f.step);
  push.setWorker(f.worker);
  push.setKind(f.kind);
  push.setDtype(f.dtype);
  if (f.kind == wire::PushKind::GRADIENT) push.setLr(f.lr);
  SetChunks(push.initChunks(chunks.size()), chunks);
  if (f.pull_back != 0) push.setPullBack(f.pull_back);
  return b.Take(std::move(payload));
}

Message Pull(const PullFields& f, const std::vector<uint32_t>& chunks) {
  wire::Outgoing b;
  auto pull = b.header().initPull();
  pull.setEpoch(f.epoch);
  pull.setMinVersion(f.min_version);
  pull.setWorker(f.worker);
  pull.setGradients(f.gradients);
  pull.setDtype(f.dtype);
  pull.setRequestId(f.request_id);
  pull.setFrozenValues(f.frozen_values);
  pull.setFinalValues(f.final_values);
  pull.setParked(f.parked);
  pull.setOptimizerState(f.optimizer_state);
  pull.setAgain(f.again);
  SetChunks(pull.initChunks(chunks.size()), chunks);
  return b.Take();
}

Message NormQuery(int worker, uint64_t epoch, uint64_t step, uint64_t request_id) {
  wire::Outgoing b(wire::Role::WORKER, worker);
  auto query = b.header().initNormQuery();
  query.setEpoch(epoch);
  query.setWorker(worker);
  query.setStep(step);
  query.setRequestId(request_id);
  return b.Take();
}

Message Reduce(const ReduceFields& f, const void* data, size_t bytes,
               std::shared_ptr<const void> owner) {
  wire::Outgoing b(wire::Role::WORKER, f.worker);
  auto reduce = b.header().initReduce();
  reduce.setWorker(f.worker);
  reduce.setGroup(f.group);
  reduce.setSeq(f.seq);
  reduce.setRank(f.rank);
  reduce.setContributors(f.contributors);
  reduce.setRoot(f.root);
  reduce.setOp(f.op);
  reduce.setDtype(f.dtype);
  reduce.setOffset(f.offset);
  reduce.setNumel(f.numel);
  reduce.setTotal(f.total);
  auto members = reduce.initMembers(f.members.size());
  for (size_t i = 0; i < f.members.size(); ++i) members.set(i, f.members[i]);
  std::vector<Frame> payload;
  payload.push_back(bytes == 0 ? Frame::Own({}) : Frame::Borrow(data, bytes, std::move(owner)));
  return b.Take(std::move(payload));
}

Message ClipNorm(int worker, uint64_t epoch, uint64_t step, double total_norm) {
  wire::Outgoing b(wire::Role::WORKER, worker);
  auto clip = b.header().initClipNorm();
  clip.setEpoch(epoch);
  clip.setWorker(worker);
  clip.setStep(step);
  clip.setTotalNorm(total_norm);
  return b.Take();
}

}  // namespace een::worker_messages
