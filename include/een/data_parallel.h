// een::DataParallel: data-parallel training of a LibTorch module through
// EEN's parameter servers, for a program started by een-launch.
//
//   een::DataParallel dp(*model, {.optimizer = een::OptimizerConfig::SGD(0.1, 0.9)});
//   een::DistributedSampler sampler(n, dp.rank(), dp.world_size());
//   for (...) {
//     auto loss = loss_fn(model->forward(x), y);
//     loss.backward();            // gradients are pushed as buckets fill
//     dp.Step(loss.item<double>(), x.size(0));  // parameters are fresh again
//   }
//   dp.Finish();
//
// The constructor joins the job from the EEN_* environment, registers the
// module's parameters, frozen parameters (requires_grad false) and buffers
// (same names and shapes on every worker) and gives every worker rank 0's
// values of all of them. During backward, hooks copy each gradient into
// fixed buckets (backward order, `bucket_bytes` each) and push a bucket as
// soon as all of its gradients are in. Step() pushes what is left
// (parameters that got no gradient count as zero) and the buffers' values,
// then pulls the new parameters into the module's own storage (server
// optimizer), or the mean gradient into each parameter's .grad
// (OptimizerConfig::Sum(), for a torch optimizer the program steps itself),
// and the buffers as `buffers` says. Frozen parameters keep rank 0's values.
// Buffers and frozen parameters are part of snapshots, --resume, rollback
// and failover, and a worker that joins later gets them.
// Parameters must be dense and contiguous, all on one device: float32 on the
// CPU, or float32, bfloat16 or float16 on a GPU (module->to(torch::kCUDA)).
// On a GPU, each gradient is copied into pinned host buckets on a side
// stream as backward produces it (ordered by CUDA events, overlapping the
// rest of backward; a bucket is pushed once its copies completed), and
// pulled parameters go back with copies the next forward waits for through
// an event; the PS keeps float32 values (--wire-dtype sets what travels).
// Buffers may be any real dtype on any device (they travel as float32:
// integers are exact up to 2^24).
// Step() with no backward() since the last step is an error (it would push
// zero gradients that still move Adam's parameters). Gradients are read from
// .grad once backward has accumulated them (so no_sync() accumulation works)
// and pushed at once: changing .grad between backward() and Step() (e.g.
// torch::nn::utils::clip_grad_norm_) cannot take effect and is an error at
// Step(): clip on the servers instead, with
// OptimizerConfig::WithClipGradNorm(max_norm) (the global norm of the mean
// gradient over every PS, as clip_grad_norm_ computes it; grad_norm() then
// returns it). With a server optimizer Step() clears .grad (as
// optimizer.zero_grad() would); in sum mode it holds the mean gradient,
// for your optimizer (clip it there, after Step()).
// Finish() (or the destructor) leaves the job: the others go on without this
// worker from the next step, as with DDP's join() (the mean is over the
// workers still training), so workers may run different numbers of steps.
// Local mode, for debugging without a job: with EEN_LOCAL=1 and no
// een-launch, the program trains in its own process as rank 0 of 1; the
// optimizer (and clipping, set_learning_rate) steps here with torch::optim's
// equivalent of the server optimizer, and every check of a job's Step()
// still holds (backward before Step, no .grad changes, no_sync rules).
// Errors throw een::Error, naming the cause (job aborted, PS lost, ...).
// Thread safety: one DataParallel per process, used from the training thread.
#pragma once

// Only the tensor type and declarations of LibTorch's module and optimizer:
// a training program includes <torch/torch.h> itself, as every LibTorch
// program does (at::Tensor is torch::Tensor).
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "een/error.h"
#include "een/optimizer.h"
#include "een/sampler.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace een {

// What happens to the module's registered buffers (BatchNorm running
// statistics, num_batches_tracked, ...) at every Step().
enum class BufferSync {
  kBroadcast,  // every worker takes rank 0's (the lowest live rank's), like
               // DDP's broadcast_buffers=True; bitwise equal on every rank
  kAverage,    // every worker takes the mean over the live workers
  kLocal,      // each worker keeps its own; not in snapshots
};

// One trainable parameter's training state: what a checkpoint holds for it
// (DataParallel::optimizer_state()).
struct ParameterState {
  std::string name;  // as the module's named_parameters() names it
  at::Tensor value;  // float32 on the CPU: the values `state` goes with
  int64_t step = 0;  // optimizer steps applied to it (torch.optim's "step")
  // By torch.optim's names: "exp_avg" and "exp_avg_sq" (Adam, AdamW),
  // "momentum_buffer" (SGD with momentum), "sum" (Adagrad); float32 on the
  // CPU, the parameter's shape. Empty before the parameter's first step
  // (Adagrad's "sum" is there from the start, as torch's is).
  std::map<std::string, at::Tensor> state;
};

struct DataParallelOptions {
  OptimizerConfig optimizer = OptimizerConfig::SGD(0.01);
  size_t bucket_bytes = 25u << 20;  // like DDP's bucket_cap_mb=25; EEN_BUCKET_BYTES overrides
  BufferSync buffers = BufferSync::kBroadcast;
  // While a JobSampler follows this DataParallel, Step() handles a rollback
  // itself (the sampler gives the redone batches again); true: Step()
  // throws een::RolledBack anyway. Without a JobSampler it always throws.
  bool raise_rolled_back = false;
};

class DataParallel {
 public:
  DataParallel(torch::nn::Module& module, DataParallelOptions options = {});
  ~DataParallel();  // Finish()es if still running
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const;
  int world_size() const;
  // Steps completed. A job restarted with `een-launch --resume` starts at the
  // snapshot's step: skip the batches already trained (same sampler epoch
  // and position) and training continues exactly where the snapshot was.
  // Under ssp/async each worker starts at its own step of the snapshot (a
  // fast one past the snapshot's step, which is the slowest worker's).
  uint64_t step() const;
  // The workers training now and this worker's place among them. Both change
  // (at the same step on every worker) when a worker is lost and the job
  // goes on without it (`een-launch --min-workers`): draw each step's batch
  // with DistributedSampler::Batch(position, live_index(), live_count(), b)
  // and advance the position by live_count() * b, and the survivors share
  // the rest of the epoch between them.
  int live_count() const;
  int live_index() const;
  // Every change of live_count() so far, oldest first; with
  // PositionAfter(step(), world_size(), membership_changes(), n, b) a
  // worker that starts mid-job (a replacement under `een-launch
  // --max-restarts`, a resume, a rollback) finds its epoch and position.
  std::vector<MembershipChange> membership_changes() const;
  // How many times the job rolled this worker back to a snapshot (a lost PS
  // with --snapshot-every): step() went back each time.
  uint64_t rollbacks() const;

  // --dynamic-slicing auto (een-launch): the job measures each worker's
  // compute time per sample and gives each live worker a share of every
  // step's global batch (live_count() * batch samples, unchanged) in
  // proportion to its speed; the shares change at the same step on every
  // worker (as live_count() does) when a worker slows down or recovers, and
  // each worker's mean gradient weighs its share of the samples on the PS,
  // so a step's result is the global batch's mean gradient, whoever took
  // how much of it. batch_slice(b) is this step's slice: the first sample
  // of the global batch and how many; take them with
  // DistributedSampler::Slice(position, offset, count) and advance the
  // position by live_count() * b as before. Every worker passes the same b.
  // Without --dynamic-slicing (dynamic_slicing() false) the slices are
  // equal: offset live_index() * b, count b. Under ssp:K the same (take
  // the slices, not NextBatch()): each gradient, applied alone as it
  // arrives, weighs its share of its step's global batch.
  struct BatchSlice {
    uint64_t offset = 0;
    uint64_t count = 0;
  };
  bool dynamic_slicing() const;
  BatchSlice batch_slice(uint64_t batch);

  // Completes one step after backward(). `loss` and `samples` (this worker's
  // batch size) feed the launcher's progress line (a NaN loss shows as nan
  // there; Step() without a loss shows "loss -"). Throws een::RolledBack
  // when a lost PS made the job go back to its last complete snapshot: the
  // module then holds that step's parameters, step() says which step and
  // every .grad is cleared (the abandoned step's gradients must not add to
  // the redone one's); carry on from there (as after --resume).
  void Step(double loss, int64_t samples = 0);
  void Step();

  // Gradient accumulation, like DDP's no_sync(): while the returned guard
  // lives, backward() only adds to each .grad (as plain torch does); the
  // first backward() after it pushes the sum and the next Step() completes
  // one step, equal to one batch made of all the micro-batches (divide each
  // micro-batch's loss by their count, as without EEN).
  //   { auto guard = dp.no_sync(); for (k < K - 1) Loss(k).backward(); }
  //   Loss(K - 1).backward(); dp.Step();
  class NoSync {
   public:
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync(NoSync&& other) noexcept;

   private:
    friend class DataParallel;
    explicit NoSync(DataParallel* dp) : dp_(dp) {}
    DataParallel* dp_;
  };
  [[nodiscard]] NoSync no_sync();

  // The server optimizer's learning rate (any finite lr >= 0) from the step
  // whose first gradient comes after this call (set it before backward();
  // a change made while a step's gradients are being pushed applies from
  // the next step, in local mode too),
  // on every PS: every worker must set the same value at the same step, as
  // a schedule computed from step() does (a PS refuses a step whose workers
  // disagree). Equal to setting the lr of a torch optimizer's param groups,
  // so a torch scheduler's values give torch's results. Not in sum mode
  // (your own optimizer has the learning rate there).
  void set_learning_rate(double lr);
  double learning_rate() const;
  // With OptimizerConfig::WithClipGradNorm: the last step's total L2 norm of
  // the mean gradient, before clipping (what clip_grad_norm_ returns); NaN
  // without clipping.
  double grad_norm() const;
  // The job's --consistency ("bsp", "ssp:K" or "async"), and how many steps
  // the slowest live worker was behind this one when the values this step
  // starts from were pulled (0 under bsp; under ssp:K at most K-1).
  std::string consistency() const;
  uint64_t staleness() const;
  // A job-wide counter for dealing out data under ssp/async: returns 0, 1,
  // 2, ... each number to exactly one worker (one round trip to the
  // coordinator), so a fast worker takes more batches than a slow one and
  // every batch of an epoch is trained once. With B batches per epoch,
  // batch k is number k % B of epoch k / B:
  //   for (uint64_t k; (k = dp.NextBatch()) < epochs * B;) train(k / B, k % B);
  // Not reproducible (who takes which batch depends on timing). Under bsp
  // it throws (kFailedPrecondition): every worker must take the same steps,
  // so use DistributedSampler's fixed slicing. The batches dealt to a
  // worker that is then lost, for its steps whose gradients did not reach
  // every PS, are dealt again to the live workers, first.
  // A restarted coordinator deals on from the count it last saved (every
  // 256 batches: up to 256 batches are then trained again). After a rollback
  // (a lost PS) this worker redoes its own steps from the snapshot's: the
  // batches it was dealt for them come again first, so none is lost or
  // trained twice.
  uint64_t NextBatch();
  // Pulls the newest parameters and buffers without a step. Under ssp or
  // async, after a Barrier(), these are the values every worker's
  // gradients made (what to evaluate or save). Not in sum mode. A rollback
  // meanwhile (a PS lost) throws een::RolledBack, as Step() does.
  void PullParameters();
  // Waits until every live worker is here. Throws een::RolledBack when a
  // lost PS rolled the job back meanwhile (as Step() does): carry on from
  // step(), redoing the steps from the snapshot, then come here again.
  void Barrier();
  // Checkpoints with the optimizer's state. optimizer_state() pulls the
  // server optimizer's state of every trainable parameter, in the module's
  // named_parameters() order, as it stands after this worker's last Step(),
  // with the values it goes with (under bsp every worker gets the same, and
  // the values are the module's; under ssp/async this worker's steps are in
  // it, and others' too). In local mode it reads the optimizer here. Throws
  // in sum mode: your own torch optimizer holds the state there.
  // Throws een::RolledBack as Step() does, if a lost PS rolled the job back.
  std::vector<ParameterState> optimizer_state();
  // The same, into `optimizer`: a torch::optim SGD, Adam, AdamW or Adagrad
  // (the job's kind) over the module's parameters(). Its state and learning
  // rate become the job's, so torch::save(module, ...) and
  // torch::save(optimizer, ...) write a checkpoint plain LibTorch trains on
  // from as the job would have (the PS optimizers are torch's arithmetic).
  // LibTorch's torch::load(optimizer, ...) restores the state but keeps the
  // loading optimizer's own options (learning rate and all, as of 1.13):
  // make it with the job's hyper-parameters.
  void CopyStateTo(torch::optim::Optimizer& optimizer);

  // Starting from a checkpoint (optimizer_state()'s, or a torch optimizer's
  // with LoadStateFrom()): every worker calls it with the same states
  // after the constructor, before its first backward(). Each parameter
  // named takes its value (when `value` is defined) and the PS take its
  // optimizer state; the job goes on from the largest `step` among them
  // (step() returns it: Adam's bias correction, a schedule and a sampler
  // that follow step() go on from there; 1 for torch's SGD, which counts
  // no steps). A parameter the states do not name starts with zero state.
  // Returns false, loading nothing, in a worker that joins a running job
  // or a job that resumed from its own snapshot (--resume): their state is
  // newer. Throws for a state that does not fit the module or the job's
  // optimizer, naming it.
  bool LoadState(const std::vector<ParameterState>& states);
  // `optimizer` (the job's kind, over module.parameters(), e.g. after
  // torch::load(optimizer, file)): its state, its steps, and the module's
  // current parameters.
  bool LoadStateFrom(const torch::optim::Optimizer& optimizer);
  // Whether LoadState() would load now (see there).
  bool takes_checkpoint() const;

  // Leaves the job: the others go on without this worker (they no longer
  // wait for its gradients). Then, as DDP's join() leaves every rank with
  // the same model, it waits until every worker has finished and puts the
  // job's final parameters and buffers in the module (under bsp a worker that
  // took the last step has them already and returns at once; under ssp/async
  // every worker pulls them, every worker's gradients in). Finish(false)
  // leaves at once, with the values of this worker's last step; so does sum
  // mode, where the PS hold no parameters. Step() and Barrier() afterwards
  // throw (kJobFinished). The destructor calls Finish() when not unwinding.
  void Finish(bool final_values = true);
  // Leaves the job as a failing worker: no "done", so the job treats this
  // worker as lost (a replacement under --max-restarts, the others going on
  // under --min-workers, else the job fails naming it). The destructor does
  // this when it runs while an exception unwinds; Python's een does it when
  // an exception leaves a `with` block or the program.
  void Abandon();

 private:
  friend class JobSampler;  // follows the job (job_sampler.h), through these:
  void AddFollowingSampler(int change);
  const void* training_sampler() const;
  void set_training_sampler(const void* sampler);
  uint64_t job_data_batch() const;  // 0: no sampler of the job has said it yet
  void NoteJobDataBatch(uint64_t batch);
  bool sum_mode() const;
  bool raises_rolled_back() const;
  // NextBatch(), where a batch never dealt is at least `not_before`, for this
  // worker's step `for_step` (a loader drawing ahead claims for later steps).
  uint64_t DealtBatchFrom(uint64_t not_before, uint64_t for_step);
  // Each Step() call: the step it trained and the rollbacks before it (the
  // newest 4096), and where each rollback went back to (1-based, the newest
  // 64): a following sampler finds which batches a rollback undid.
  struct StepCall {
    uint64_t step = 0;
    uint64_t rollbacks = 0;
  };
  uint64_t steps_called() const;
  std::optional<StepCall> step_call(uint64_t call) const;
  std::optional<uint64_t> rolled_back_to(uint64_t rollback) const;
  // The most steps past the one it trains that the loop drew its data (the job's changes of
  // the data's layout take effect past the largest).
  void NoteDataLookAhead(uint64_t steps);
  // membership_changes() and those heard that take effect at a later step (a loop's data
  // drawn ahead follow them).
  std::vector<MembershipChange> known_membership_changes() const;
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace een
