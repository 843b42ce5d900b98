// ChunkStore: the chunks one PS owns, and BSP aggregation over them.
//
// Every owned chunk has its values and optimizer state in the PS Arena and a
// version: the number of steps applied. For step t == version, each of the
// `num_workers` workers contributes one gradient; when the last arrives the
// contributions are summed in worker-rank order (reproducible run to run),
// divided by the number of workers (DDP's mean), and either the optimizer is
// applied once or (sum mode) the mean is kept for pulling. Then version = t+1.
// Contributions are held zero-copy (the received Frames) until aggregated.
// With replicas 2 the store also holds the chunks this PS backs up: they
// take no gradients, only the primary's mean gradient (ApplyReplica, the
// same optimizer step, so both copies stay bitwise equal) or a whole image
// (LoadImage); Adopt() follows the map when shards move (promotion, new
// backups). A primary chunk's `acked` version is what its backup confirmed.
// With gradient clipping (the optimizer's clip_grad_norm > 0) a complete
// step is only aggregated: the chunk holds its mean back (awaiting the
// total norm, NormOf() gives this PS's share of it) until ApplyClipped()
// brings the total every worker computed; then each mean is scaled as
// torch::nn::utils::clip_grad_norm_ scales and the optimizer applied.
// Buffer chunks (TensorKind) take values instead of gradients, always fp32:
// a step keeps the lowest live rank's (broadcast) or their mean (average),
// with no optimizer. Frozen chunks take an empty contribution each step:
// their version moves on with the others', their values never change.
// Under ssp:K and async (SetConsistency) each gradient is applied alone as
// it arrives: one optimizer step at learning rate / live workers (Adam and
// AdamW: / sqrt(live workers), and a lower beta1: see common/consistency.h) (a broadcast
// buffer takes the lowest live rank's values; others' only count), the
// version counts those applications, and each chunk keeps, per worker, how
// many of its steps were applied (WorkerSteps: the next step it may push)
// and the version its last one made (AppliedAt: what a backup must confirm
// before that worker's pull is answered). A repeated step is dropped
// (IsRepeat), so a gradient resent after a failover is applied once.
// Callers validate messages first; methods here return InvalidArgument or
// FailedPrecondition for anything inconsistent and change nothing then.
// Thread safety: single-threaded (the PS event loop).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/consistency.h"
#include "common/shard_map.h"
#include "common/snapshot_store.h"
#include "common/status.h"
#include "common/transport/frame.h"
#include "common/wire_dtype.h"
#include "een/optimizer.h"
#include "ps/apply_pool.h"
#include "ps/arena.h"
#include "ps/batch_shares.h"
#include "ps/optimizer.h"
#include "ps/step_kernel.h"

namespace een::ps {

class ChunkStore {
 public:
  // `device`: the data plane's transport device, which allocates the arenas
  // (so pulls are answered from them without a copy where it can); nullptr:
  // plain memory.
  static Result<std::unique_ptr<ChunkStore>> Create(const ShardMap& map, uint32_t ps,
                                                    int num_workers,
                                                    const OptimizerConfig& optimizer,
                                                    transport::Device* device = nullptr);

  // Owns: this PS is the chunk's primary. Holds: primary or backup.
  bool Holds(uint32_t chunk) const { return chunk < slot_of_.size() && slot_of_[chunk] >= 0; }
  bool Owns(uint32_t chunk) const { return Holds(chunk) && SlotOf(chunk).primary; }
  bool BacksUp(uint32_t chunk) const { return Holds(chunk) && !SlotOf(chunk).primary; }
  uint32_t Numel(uint32_t chunk) const { return map_.chunks()[chunk].numel; }
  TensorKind Kind(uint32_t chunk) const { return map_.KindOfChunk(chunk); }
  // Bytes one worker's step contribution to `chunk` has in `type`.
  size_t ContributionBytes(uint32_t chunk, WireType type) const;
  uint64_t Version(uint32_t chunk) const { return SlotOf(chunk).version; }
  bool Initialized(uint32_t chunk) const { return SlotOf(chunk).initialized; }
  bool AllInitialized() const;
  bool HasContribution(uint32_t chunk, int worker) const;
  bool sum_mode() const { return optimizer_ == nullptr; }
  // The optimizer state slots each parameter chunk holds (0 in sum mode).
  int StateSlots() const { return optimizer_ ? optimizer_->state_slots() : 0; }
  // The floats of a chunk's image (CaptureChunk): values and state slots.
  size_t ImageFloats(uint32_t chunk) const {
    return size_t{Numel(chunk)} * (1 + SlotOf(chunk).state.size());
  }
  // Before any gradient: bsp (the default), ssp:K or async.
  // Under ssp/async Adam/AdamW's beta1 is PerArrivalBeta1 of the job's
  // workers when this store was made.
  void SetConsistency(const Consistency& c);
  // ssp/async: how each arrival is applied, for the log ("learning rate /
  // sqrt(live workers), beta1 0.15 for 4 workers (...)").
  std::string PerArrivalRule() const;
  const Consistency& consistency() const { return consistency_; }
  // ssp/async: worker `worker`'s steps applied to `chunk` (its next step).
  uint64_t WorkerSteps(uint32_t chunk, int worker) const {
    return SlotOf(chunk).worker_steps[worker];
  }
  uint64_t AppliedAt(uint32_t chunk, int worker) const { return SlotOf(chunk).applied_at[worker]; }
  // ssp/async: the fewest steps any live worker has applied to `chunk`
  // (leaving out parked ones); UINT64_MAX when none is left.
  uint64_t SlowestSteps(uint32_t chunk) const;
  // ssp: the worker takes no step until its next gradient (it waits at a
  // barrier): the bound leaves it out until then. Unknown ranks are ignored.
  void Park(int worker) {
    if (worker >= 0 && worker < num_workers_) parked_[worker] = true;
  }
  // ssp/async: the most steps any worker has applied anywhere here.
  uint64_t NewestWorkerStep() const;
  // ssp/async: the worker and step the chunk's last application came from.
  int LastWorker(uint32_t chunk) const { return SlotOf(chunk).last_worker; }
  uint64_t LastWorkerStep(uint32_t chunk) const { return SlotOf(chunk).last_worker_step; }
  // Whether worker `worker`'s gradient of `step` for `chunk` was counted
  // already (it is dropped); FailedPrecondition for a step out of order.
  Result<bool> IsRepeat(uint32_t chunk, int worker, uint64_t step) const;
  int num_workers() const { return num_workers_; }
  const Arena& arena() const { return *arenas_.front(); }
  size_t owned_chunks() const { return slots_.size(); }  // held: primary and backup
  size_t arena_bytes() const;
  // The version the backup confirmed (-1: none yet, or no backup).
  int64_t Acked(uint32_t chunk) const { return SlotOf(chunk).acked; }
  void SetAcked(uint32_t chunk, int64_t version) { slots_[slot_of_[chunk]].acked = version; }

  struct Adoption {
    std::vector<uint32_t> promoted;     // were backups here, now primaries
    std::vector<uint32_t> new_backups;  // newly held as backup: wait for an image
  };
  // Follows `next` for PS `ps`: keeps what stays, promotes, demotes (a chunk
  // moved away that this PS now backs up: gradients held for it are
  // dropped, the new owner has them resent), makes room for new backups (a
  // fresh arena block), forgets chunks it no longer holds.
  Result<Adoption> Adopt(const ShardMap& next, uint32_t ps);
  // Backup: the primary's mean gradient of step `step`, applied with the
  // learning rate the primary used (< 0: the configured one). Returns false
  // for a step already applied (a repeat), FailedPrecondition for a gap.
  // `norm`: the total norm the primary clipped that step with (< 0: unknown).
  // ssp/async: `worker` and `worker_step` say whose gradient it was.
  Result<bool> ApplyReplica(uint32_t chunk, uint64_t step, const transport::Frame& mean,
                            double lr = -1, double norm = -1, int worker = -1,
                            uint64_t worker_step = 0);
  // The learning rate and (clipping) total norm the chunk's last step was applied with.
  double AppliedLr(uint32_t chunk) const { return SlotOf(chunk).applied_lr; }
  double AppliedNorm(uint32_t chunk) const { return SlotOf(chunk).applied_norm; }
  // The whole chunk (values, optimizer state, version), e.g. to build a backup.
  ChunkImage CaptureChunk(uint32_t chunk) const;
  Status LoadImage(const ChunkImage& image);

  // Rank 0's starting values; once per chunk.
  Status SetInitial(uint32_t chunk, const transport::Frame& values);
  // One worker's gradient for step `step` (== Version). Returns true when this
  // completed the step (the update is applied and Version moved on).
  Result<bool> AddGradient(uint32_t chunk, int worker, uint64_t step, transport::Frame grad);
  // The same in two halves, so a whole message's completed chunks are
  // applied together on the apply threads: Contribute() only records the
  // gradient and says whether the step is complete; ApplySteps() then
  // aggregates and applies those chunks (each must be complete).
  // `lr`: the learning rate the worker asks for this step (< 0: the
  // configured one); every worker must ask the same (FailedPrecondition otherwise).
  Result<bool> Contribute(uint32_t chunk, int worker, uint64_t step, transport::Frame grad,
                          WireType type = WireType::kF32, double lr = -1);
  // Returns the chunks whose version moved on (with clipping: none, unless
  // that step's total norm is known already; the rest await ApplyClipped).
  std::vector<uint32_t> ApplySteps(const std::vector<uint32_t>& chunks);
  // Clipping: this PS's share of step `step`'s squared norm (each owned
  // parameter chunk's sum of squares), once every chunk it owns has
  // aggregated that step (kWaiting before); kApplied with the total norm if
  // a chunk here applied that step already (a promoted backup); kGone if the
  // step is long past or its norm unknown here.
  struct NormShare {
    enum class State { kWaiting, kPartial, kApplied, kGone } state = State::kWaiting;
    double total_norm = 0;         // kApplied
    std::vector<uint32_t> chunks;  // kPartial
    std::vector<double> sum_squares;
  };
  NormShare NormOf(uint64_t step) const;
  // Clipping: step `step`'s total norm (the same on every worker): applies
  // every chunk holding that step back, and any that completes it later.
  // Returns the chunks applied now.
  std::vector<uint32_t> ApplyClipped(uint64_t step, double total_norm);
  bool clipping() const { return optimizer_ && max_norm_ > 0; }
  // Threads for ApplySteps (null: the caller's thread only). Must outlive the store.
  void SetApplyPool(ApplyPool* pool) { pool_ = pool; }
  // A worker's NaN or infinite gradient is never applied: a parameter chunk whose step's mean
  // holds one keeps its version (ApplySteps leaves it out; blocks of it may have been updated,
  // so the step must not be published: the job ends). The first one found, said for the
  // job's verdict ("worker 1's gradient of step 3 for tensor 'fc.bias' (element 2) is NaN or
  // infinite: ..."); empty while none was.
  const std::string& nonfinite() const { return nonfinite_; }
  // Off: no look at the means (een-bench apply measures what the look costs).
  void SetNonFiniteCheck(bool on) { check_nonfinite_ = on; }
  // The lowest version over every chunk held here (the step all have reached).
  uint64_t MinVersion() const;
  uint64_t MaxVersion() const;
  // The step every chunk here has completed, what a snapshot is labelled
  // with: MinVersion() under bsp; under ssp/async the fewest steps any live
  // worker (waiting at a barrier or not) has applied to any chunk here. A
  // snapshot of that label holds each worker's steps up to it at least,
  // and per chunk exactly which (Capture() keeps them).
  uint64_t CompletedStep() const;
  // A copy of every chunk: values, optimizer state and version (and under
  // ssp/async each worker's steps applied).
  std::vector<ChunkImage> Capture() const;
  // Loads a snapshot; it must hold every chunk here, each of the right size.
  // Under ssp/async a bsp snapshot (no per-worker steps) counts its step
  // for every worker, and a worker behind `step`, the snapshot's (one the
  // snapshot's job did not have, or had lost), starts there; under bsp an
  // ssp/async one is refused (its versions count single gradients, not
  // steps).
  Status Restore(const std::vector<ChunkImage>& images, uint64_t step = 0);
  // A lost worker: no step waits for it any more (a contribution of it that
  // already arrived still counts). Returns the chunks this applied.
  std::vector<uint32_t> RemoveWorker(int worker);
  // bsp, before RemoveWorker: the first step whose gradient from `worker`
  // is missing from a chunk this PS owns (its batches from there on were
  // not trained, if it is lost); nullopt when this PS owns none.
  std::optional<uint64_t> FirstStepMissing(int worker) const;
  bool IsLive(int worker) const { return worker >= 0 && worker < num_workers_ && live_[worker]; }
  // A worker (a replacement, or a new rank: the store grows) that trains
  // from step `step`: steps before it complete without it, every step from
  // it on waits for it.
  Status AddWorker(int worker, uint64_t step);
  uint64_t JoinStep(int worker) const { return join_step_[worker]; }
  std::vector<int> LiveWorkers() const;
  // --dynamic-slicing: a committed membership's batch shares; each
  // parameter gradient then weighs its worker's share (batch_shares.h).
  Status AddBatchShares(const MembershipChange& change) { return batch_shares_.Add(change); }
  // The step that has waited longest for gradients (some arrived, not all):
  // which chunk, since when, and the workers it still waits for.
  struct Stall {
    uint32_t chunk = 0;
    uint64_t step = 0;
    std::chrono::steady_clock::time_point since;
    std::vector<int> missing;
  };
  std::optional<Stall> OldestStall() const;
  // Values (or, in sum mode or for replication, the last mean gradient) as
  // zero-copy frames.
  transport::Frame Values(uint32_t chunk) const;
  transport::Frame MeanGradient(uint32_t chunk) const;
  // The same on a bf16/fp16 wire: values converted once per version (and
  // from then on during each step's apply, while still in cache), shared by
  // every pull of that version; mean gradients converted per call.
  transport::Frame WireValues(uint32_t chunk, WireType type);
  transport::Frame WireMeanGradient(uint32_t chunk, WireType type) const;

 private:
  struct Slot {
    bool primary = true;
    TensorKind kind = TensorKind::kParameter;
    int64_t acked = -1;
    std::shared_ptr<Arena> arena;  // holds values and state; lent with frames
    float* values = nullptr;
    std::vector<float*> state;
    uint64_t version = 0;
    bool initialized = false;
    std::vector<transport::Frame> contributions;  // per worker, for step `version`
    std::vector<WireType> contribution_types;     // their dtypes
    // The values converted for a bf16/fp16 wire; `wire_fresh` while they
    // match the values (every change of the values clears it).
    std::shared_ptr<std::vector<uint16_t>> wire;
    WireType wire_type = WireType::kF32;
    bool wire_fresh = false;
    std::chrono::steady_clock::time_point first_contribution;  // of step `version`
    std::shared_ptr<std::vector<float>> mean;  // last step's mean (sum mode, replicas)
    double step_lr = -1;    // asked by the contributions of step `version` (< 0: configured)
    int step_lr_from = -1;  // the worker that asked first
    double applied_lr = 0;  // the last applied step's
    // Clipping: the step is aggregated (mean in `mean`, `sum_squares` its
    // squared norm) and held back for the total norm.
    bool awaiting_clip = false;
    double sum_squares = 0;
    double applied_norm = 0;  // the total norm the last applied step was clipped with
    bool norm_known = false;  // applied_norm is (false after an image or a snapshot)
    // ssp/async, per worker: its steps applied here, and the version its
    // last one made; and whose the last application was.
    std::vector<uint64_t> worker_steps;
    std::vector<uint64_t> applied_at;
    int last_worker = -1;
    uint64_t last_worker_step = 0;
  };

  ChunkStore(const ShardMap& map, int num_workers)
      : map_(map),
        num_workers_(num_workers),
        live_(num_workers, true),
        parked_(num_workers, false),
        join_step_(num_workers, 0) {}
  // Slots for `chunks`, in one new arena block.
  Status AddSlots(const std::vector<uint32_t>& chunks, uint32_t ps);
  // A buffer for a chunk's mean: the slot's own unless a send still holds it.
  float* MeanBuffer(Slot& slot, uint32_t numel);
  // The slot's wire buffer, reallocated if a frame in flight still holds it.
  uint16_t* WireBuffer(Slot& slot, uint32_t numel);
  const Slot& SlotOf(uint32_t chunk) const { return slots_[slot_of_[chunk]]; }
  bool Complete(const Slot& slot) const;  // every live worker's gradient is in
  // ssp/async: the worker whose gradient the slot holds (one at most), or -1.
  int ArrivedFrom(const Slot& slot) const;
  // Without building LiveWorkers()' vector (each arrival's apply asks).
  int LowestLive() const;  // -1: none
  int LiveCount() const;
  // The pieces of `inputs` (one per chunk; those with no gradient skipped)
  // on the apply threads. Returns, per chunk, whether its mean held a NaN or an infinity
  // (parameter chunks, when checked; nonfinite() then says whose).
  std::vector<bool> Run(std::vector<StepInputs>& inputs, const std::vector<uint32_t>& chunks);
  // Which worker's gradient (or the sum) made the chunk's mean non-finite, for nonfinite().
  std::string DescribeNonFinite(uint32_t chunk) const;
  // The slot's contributions as the step's gradients (rank order; a
  // broadcast buffer: the lowest live rank's only) and their count.
  void TakeContributions(const Slot& slot, StepInputs* in);
  // After a step ran: contributions released, version moved on.
  void Advance(Slot& slot, const StepInputs& in);
  // Clipping: the means of complete chunks, held back.
  void Aggregate(const std::vector<uint32_t>& chunks);
  // Clipping: held-back chunks scaled by the known norm's coefficient and applied.
  std::vector<uint32_t> ApplyHeld(const std::vector<uint32_t>& chunks);

  ShardMap map_;
  bool check_nonfinite_ = true;
  std::string nonfinite_;
  // Run()'s per-chunk flags, kept between calls (an apply call must not allocate them).
  std::unique_ptr<std::atomic<bool>[]> nonfinite_flags_;
  size_t nonfinite_flags_size_ = 0;
  int num_workers_;
  std::vector<bool> live_;
  std::vector<bool> parked_;         // ssp: waiting at a barrier (see Park)
  std::vector<uint64_t> join_step_;  // per worker: the first step it takes part in
  std::unique_ptr<Optimizer> optimizer_;
  bool adam_ = false;                 // Adam or AdamW: ssp/async take lr / sqrt(N), not lr / N
  OptimizerConfig optimizer_config_;  // as the job gave it
  int job_workers_ = 0;               // the job's workers when this store was made
  std::vector<std::shared_ptr<Arena>> arenas_;  // first: the job's start; then one per Adopt
  std::vector<int32_t> slot_of_;                // chunk id -> slot, -1 if not owned
  std::vector<Slot> slots_;
  ApplyPool* pool_ = nullptr;
  transport::Device* device_ = nullptr;    // allocates the arenas; outlives the store
  double max_norm_ = 0;                    // clip_grad_norm (0: no clipping)
  uint64_t known_norm_step_ = UINT64_MAX;  // the step whose total norm is known
  double known_norm_ = 0;
  Consistency consistency_;
  BatchShares batch_shares_;
};

}  // namespace een::ps
