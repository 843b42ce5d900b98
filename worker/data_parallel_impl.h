// DataParallel::Impl: the state behind een::DataParallel, shared by its
// files: data_parallel.cc (joining, gradient hooks, Step(), pulls and
// recovery) and data_parallel_checkpoint.cc (optimizer state out of the job
// and into it). Not part of the public API.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "een/data_parallel.h"
#include "een/redo_log.h"
#include "worker/bucket_layout.h"
#include "worker/device/device_copies.h"
#include "worker/device/gradient_stager.h"
#include "worker/local_optimizer.h"
#include "worker/timeline.h"
#include "worker/worker_client.h"

namespace een {

// Throws een::Error "een: <where>: <message>" (with the public code) unless `s` is ok.
void ThrowIfError(const Status& s, const std::string& where);

// This process's one DataParallel in a job (a second would join as the same
// rank): held by it, given back with it or when its constructor throws (a
// program may try again).
struct JoinedSlot {
  bool held = false;
  ~JoinedSlot();
};

class DataParallel::Impl {
 public:
  Impl(torch::nn::Module& module, DataParallelOptions options);
  ~Impl();

  // After backward accumulated parameter `tensor`'s .grad (an autograd post hook).
  void OnGradient(size_t tensor);
  void SetNoSync(bool on);
  // Throws if a pushed .grad was replaced or changed since (version counter,
  // and a few elements of each chunk compared with the bucket).
  void CheckGradientsUnchanged() const;
  // A parameter changed in place since EEN last wrote it (a torch
  // optimizer's step() beside Step()) throws, unless in sum mode (the
  // program's own optimizer is the point there).
  void NoteParameterVersions();
  void CheckParametersUnchanged() const;
  bool SameAsPushed(size_t tensor) const;
  void SetLearningRate(double lr);
  double LearningRate() const;
  void Step(std::optional<double> loss, int64_t samples);
  // Step(), a rollback handled here while a JobSampler follows this worker.
  void StepThroughRollback(std::optional<double> loss, int64_t samples);
  bool SumMode() const { return optimizer_.kind == OptimizerConfig::Kind::kSum; }

  std::unique_ptr<WorkerClient> client_;  // null in local mode
  bool left_ = false;                     // Finish() or Abandon() was called
  // Throws if this worker has left the job (a call after Finish()).
  void CheckNotLeft(const char* call) const;
  // EEN_LOCAL=1: the optimizer steps here; no job, no PS, world size 1.
  std::unique_ptr<LocalOptimizer> local_;
  double grad_norm_ = NAN;  // the last step's total gradient norm (clipping only)
  uint64_t step_ = 0;
  uint64_t samples_ = 0;
  uint64_t rollbacks_ = 0;                       // RollBack()s so far
  uint64_t steps_called_ = 0;                    // Step() calls so far
  std::deque<DataParallel::StepCall> call_log_;  // the newest Step() calls'
  std::deque<uint64_t> rollback_steps_;          // where the newest rollbacks went back to
  int following_samplers_ = 0;                   // JobSamplers following this worker
  const void* training_sampler_ = nullptr;       // the JobSampler steps were taken in (one)
  bool raise_rolled_back_ = false;               // DataParallelOptions::raise_rolled_back
  uint64_t local_batches_ = 0;                   // NextBatch() in local mode
  // NextBatch() under ssp/async: the batch dealt for each of this worker's steps (the newest
  // 65536); after a rollback those of the undone steps are dealt again first.
  RedoLog<uint64_t> dealt_{1 << 16};
  uint64_t dealt_rollbacks_ = 0;  // rollbacks_ when dealt_ was last looked at
  // PullParameters(): a rollback meanwhile (a PS lost) throws een::RolledBack, as Step() and
  // Barrier() do, so the loop or its sampler redoes the steps from the snapshot.
  void PullLatest();
  // Checkpoints (data_parallel_checkpoint.cc).
  std::vector<ParameterState> OptimizerState();
  void CopyStateTo(torch::optim::Optimizer& optimizer);
  // Whether LoadState() would load: before the first step of a job that
  // starts (not resumed from its snapshots, not joining a running job).
  bool TakesCheckpoint() const;
  bool LoadState(const std::vector<ParameterState>& states);
  // Finish() (data_parallel.cc): leaves training, waits until every worker
  // finished, and takes the job's final values.
  void FinishWithFinalValues();
  // `optimizer`'s state of each trainable parameter (those with any).
  std::vector<ParameterState> TorchOptimizerState(const torch::optim::Optimizer& optimizer) const;
  // Waits at the job's barrier; throws RolledBack when a rollback sent this
  // worker back to redo its steps.
  void Barrier();
  // NextBatch() under ssp/async: the batches of steps a rollback undid first, then the job's.
  uint64_t DealBatch(uint64_t not_before, uint64_t for_step);

 private:
  struct BucketState {
    std::shared_ptr<float> buffer;  // shared with in-flight frames
    size_t pending = 0;             // tensors still to arrive
  };

  void BuildBuckets(size_t bucket_bytes);
  void ResetBuckets();
  // Marks tensor `t` as arrived and pushes each bucket it completes.
  void Arrived(size_t t);
  void PushBucket(uint32_t bucket);
  void PullInto(uint64_t version, bool gradients);
  // PullInto's pull without storing: everything (frozen parameters too) of
  // `version` into place or the mirrors; StorePulled() finishes it.
  Status PullEverything(uint64_t version, bool gradients);
  // Runs `attempt` (given how many recoveries came before it) until it
  // succeeds, recovering each time it failed because a PS was lost, at most
  // 10 times; then throws its error, saying `what`. A rollback meanwhile
  // goes to `rolled_back` (its step), which throws or lets the retry go on.
  void ThroughPsLoss(const std::function<Status(int recoveries)>& attempt, const std::string& what,
                     const std::function<void(uint64_t step)>& rolled_back);
  Status TryPullInto(uint64_t version, bool gradients);
  // The map moved on: fetch it; after a rollback go back to that step
  // (throws RolledBack), after a failover resend this step's buckets.
  void Recover();
  [[noreturn]] void RollBack(uint64_t step);

  // Every registered tensor, in the shard map's order (its tensor index).
  struct Registered {
    torch::Tensor tensor;  // the module's own
    std::string name;
    TensorKind kind;
    size_t staging = 0;    // buffers: offset into the staging vectors, in floats
    int64_t version = -1;  // parameters: tensor._version() when EEN last wrote it (-1: unknown)
  };
  void Register(torch::nn::Module& module, BufferSync buffers);
  // A post hook on each parameter's grad accumulator (OnGradient).
  void HookGradients();
  // After the module's parameters were loaded in place (torch::load uses
  // set_, which gives a parameter a new grad accumulator): hooks again.
  void RehookIfReplaced();
  bool AccumulatorsReplaced() const;
  // Local mode: the checks of a job's Step(), then the optimizer here.
  void LocalStep(int64_t samples);
  // Checks shared by both: throws for a Step() the job would refuse.
  void CheckStepAllowed();
  // Rank 0: every tensor's starting values to the PS.
  void PushInitialValues();
  // The first values (rank 0's, or a snapshot's), through a PS lost meanwhile.
  void JoinPull();
  // This step's buffer values, and an empty push for frozen parameters (their
  // step goes by on the PS without them changing).
  void PushValues();
  // Pulled buffer values (in staging) into the module's buffers.
  void StoreBuffers();
  // Where pulled chunk `c` goes: the parameter (or, `gradients`, its .grad)
  // or a buffer's staging.
  float* Destination(uint32_t c, bool gradients);

  std::vector<Registered> tensors_;
  size_t staging_numel_ = 0;
  std::shared_ptr<std::vector<float>> push_staging_;  // buffer values pushed (frames hold it)
  std::vector<float> pull_staging_;                   // buffer values pulled
  // Each parameter's grad accumulator and our post hook on it (kept alive:
  // the parameter only holds it weakly, as DDP's reducer knows).
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> accumulators_;
  bool backward_seen_ = false;  // a gradient arrived since the last Step()
  std::string hook_error_;      // what a gradient hook found wrong; thrown by Step()
  JoinedSlot joined_;           // in a job: this process's one DataParallel
  bool no_sync_ = false;        // inside DataParallel::no_sync(): gradients stay in .grad
  // The .grad each parameter's push was read from, and its version then: a
  // change before Step() (clip_grad_norm_, ...) would be lost.
  struct PushedGrad {
    const c10::TensorImpl* impl = nullptr;
    int64_t version = 0;
  };
  std::vector<PushedGrad> pushed_grads_;
  std::vector<torch::Tensor> local_grads_;  // local mode: a copy of each .grad as backward left it
  OptimizerConfig optimizer_;               // the job's (rank 0's), or this program's in local mode
  double lr_ = -1;  // set_learning_rate()'s (< 0: the configured one), from the next step's pushes
  std::unique_ptr<BucketLayout> layout_;
  std::vector<BucketState> buckets_;
  std::vector<float*> bucket_data_;
  std::vector<bool> arrived_;
  bool recovery_pending_ = false;  // a push or pull found the map moved on
  // The step's first gradient (the flight recorder's backward).
  std::chrono::steady_clock::time_point backward_begin_;
  // When the last Step() returned: the time from then to the next Step() is
  // the program's compute (forward, backward, data).
  std::optional<std::chrono::steady_clock::time_point> last_step_end_;
  // EEN_TRACE_RECORD=FILE: worker 0 writes the first step's gradient order
  // there (samples/traces/README.md has the format).
  std::string trace_path_;
  std::vector<size_t> arrival_;
  void WriteTrace();
  // EEN_TIMELINE=PREFIX: when backward, pushes and syncs happened (timeline.h).
  std::unique_ptr<Timeline> timeline_;
  bool in_step_ = false;  // pushes from Step() came after backward
  std::mutex mu_;         // hooks may run on autograd's threads

  // The device path (worker/device/), for a model on a GPU: gradients go to
  // the host buckets through asynchronous copies (the stager pushes a bucket
  // once its copies completed), pulls land in host mirrors and go back with
  // copies the next forward waits for. EEN_FAKE_DEVICE_COPIES=1 (tests)
  // sends CPU parameters this way through a fake device.
  void SetUpDevicePath();
  // Every parameter's .grad undefined, as optimizer.zero_grad() leaves it.
  void ClearGradients();
  // Before a pull writes the mirrors: the last copies out of them are done.
  void BeforePull();
  // After a pull: each mirror it wrote back to its tensor (or, `gradients`,
  // a parameter's .grad), the next forward fenced behind them; then buffers.
  void StorePulled(bool gradients);
  std::optional<c10::Device> device_;  // the parameters' device when not the CPU
  bool fake_device_ = false;
  std::unique_ptr<DeviceCopies> copies_;
  std::unique_ptr<GradientStager> stager_;  // after copies_: goes first
  std::vector<torch::Tensor> mirrors_;      // per tensor: float32 host values (pulls land here)
  std::vector<uint8_t> mirror_pulled_;      // per tensor: a pull wrote its mirror since
  std::vector<uint8_t> staged_;             // per tensor: its gradient was staged this step
  std::vector<void*> pinned_;               // host memory pinned for the copies
};

}  // namespace een
