// een::ProcessGroup: the `een` backend of torch.distributed. `import een`
// registers it, so an unchanged DDP script with
//
//   dist.init_process_group("een")
//   model = DistributedDataParallel(model)
//
// moves its gradients through the job's parameter servers: each allreduce
// is split over the PS (one contiguous part per PS; a small tensor goes
// whole to one PS), every member pushes its part, the PS reduces the parts
// in rank order once all came and answers every member with the same bytes
// (BytePS's push-sum and pull; schema Reduce). broadcast, allgather, gather,
// scatter, reduce, reduce_scatter and barrier ride on the same service, so
// do torch's object collectives.
//
// Ops: SUM, AVG (floating types), PRODUCT, MIN, MAX; dtypes float32,
// float64, float16, bfloat16, int32, int64, uint8, int8; CPU tensors (a
// CUDA tensor is copied through the host). Not supported: send/recv,
// alltoall, BAND/BOR/BXOR, PREMUL_SUM.
//
// A process joins the job once (as een.DataParallel does; the two cannot
// be mixed in one process), with the EEN_* environment een-launch gives
// it; every group of the process shares that membership. A group is named
// by its members' job ranks (agreed through the c10d store torch passes)
// and how many groups of the same members came before; each call by its
// number in the group: the PS's keys. One thread per process sends every
// call as soon as it is issued (later ones travel while earlier ones are
// reduced) and completes each group's calls in their order, whatever other
// groups wait for (as gloo's thread per group would);
// Work::wait() and getFuture() (DDP's comm hook) wait for the call, and
// carry een-launch's verdict when the job ended elsewhere.
//
// Failures: with --replicas 2 each part goes to two PS and the first answer
// counts (a lost PS changes nothing, bitwise); with --min-workers a lost
// member is absent from every call from then on (float sums scaled by
// size / members present; LiveRanks() says who took part). A member that
// finished (exit 0) fails the calls still waiting for it.
// Thread safety: as any c10d::ProcessGroup (calls from any thread; they are
// sent in issue order).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace een {

class CollectiveSession;  // the process's membership and its calls' thread
struct CallFinish;        // what a started call leaves to do (process_group.cc)
namespace worker_messages {
struct ReduceFields;  // one collective call (worker/worker_messages.h)
}

class AbsentRanks;  // the ranks a group's latest call went without (process_group.cc)

class ProcessGroup : public c10d::ProcessGroup {
 public:
  // What torch.distributed's backend registry calls: joins the job (the
  // first time in this process), agrees on the group's name through
  // `store`. Throws een::Error when the process is not part of a job.
  static c10::intrusive_ptr<ProcessGroup> Create(const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int size,
                                                 std::chrono::milliseconds timeout);
  ProcessGroup(std::shared_ptr<CollectiveSession> session, uint32_t group, int rank, int size);
  ~ProcessGroup() override;

  const std::string getBackendName() const override { return "een"; }
  // The job ranks of the members, in group-rank order.
  const std::vector<int>& members() const { return members_; }
  // The group ranks whose parts the group's latest call included: every
  // rank until one is lost and the job goes on without it (--min-workers;
  // getSize() stays the launch size, as DDP's contract wants).
  std::vector<int> LiveRanks() const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override;

 private:
  // Queues a call on the session's thread: `start` (it gets the call's
  // number) sends its parts and returns what finishes it (the call whose
  // answers it waits for; what copies them out). The Work completes with
  // `outputs` then.
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::function<CallFinish(uint64_t)> start);

  // A call's fields that are the group's (the sender, the group, its rank
  // and size).
  worker_messages::ReduceFields Fields() const;

  std::shared_ptr<CollectiveSession> session_;
  uint32_t group_ = 0;
  std::vector<int> members_;
  std::shared_ptr<AbsentRanks> absent_;
  uint64_t next_seq_ = 1;  // guarded by the session's queue lock
  friend class CollectiveSession;
};

}  // namespace een
