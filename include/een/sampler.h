// DistributedSampler: this worker's share of a dataset, as torch's
// DistributedSampler does it. Each epoch the indices 0..size-1 are shuffled
// with (seed + epoch) (the same permutation on every worker), padded by
// wrapping around so every worker gets the same count (or truncated with
// drop_last), and worker r takes positions r, r + W, r + 2W, ...
// So batch s of every worker together is exactly positions
// [s*b*W, (s+1)*b*W) of the permutation: the global batch of single-process
// training. A plain value; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "een/membership.h"

namespace een {

// Where the data stands after `steps` steps: the epoch, and the position in
// that epoch's permutation where the next global batch starts. Each step
// the live workers take live_count * batch positions; an epoch ends once
// its `dataset_size` positions are used up (the last step may wrap), and
// the next starts at 0. `changes` (oldest first) say how many workers were
// live when; before the first, all `world_size`. A worker that joins a
// running job, or one that resumes or rolls back, starts from here.
struct DataPosition {
  uint64_t epoch = 0;
  uint64_t position = 0;
};
// (An explicit loop's: a lost worker's unfinished steps are not counted,
// so Batch() at this position continues its layout; JobSampler's StepData
// deals them again.)
DataPosition PositionAfter(uint64_t steps, int world_size,
                           const std::vector<MembershipChange>& changes, uint64_t dataset_size,
                           uint64_t batch);

// What step `step` draws, as JobSampler follows the job. The step's global
// batch is live_count * batch positions: first `owed` (the positions of a
// lost worker's unfinished steps, MembershipChange::unfinished, up to the
// change's data step: they were not trained), then fresh ones of epoch
// `epoch`'s permutation from `position` on, wrapping at the epoch's end as
// PositionAfter does. An owed position is of its own epoch (owed_epochs):
// this one's, or the one before when that ended before the change's data
// step (its pass was drawn whole: the next one draws them first). With
// nothing owed it is PositionAfter's layout.
struct StepData {
  uint64_t epoch = 0;
  uint64_t position = 0;
  std::vector<uint64_t> owed;
  std::vector<int> live;              // the workers live at the step, ascending
  std::vector<uint32_t> shares;       // --dynamic-slicing: theirs (empty: equal)
  std::vector<uint64_t> owed_epochs;  // the epoch of each owed position
  // The positions worker `rank` trains at this step (empty: not live):
  // slots index, index + count, ... of the global batch (Batch()'s
  // layout), or its contiguous share under --dynamic-slicing.
  std::vector<uint64_t> PositionsOf(int rank, uint64_t batch, uint64_t dataset_size) const;
  // The epoch of each of PositionsOf()'s positions.
  std::vector<uint64_t> EpochsOf(int rank, uint64_t batch) const;
};
StepData StepDataAt(uint64_t step, int world_size, const std::vector<MembershipChange>& changes,
                    uint64_t dataset_size, uint64_t batch);

class DistributedSampler {
 public:
  DistributedSampler(size_t dataset_size, int rank, int world_size, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  void set_epoch(uint64_t epoch);
  // This worker's indices for the current epoch, in order.
  std::vector<size_t> indices() const;
  // The shuffled order of the whole dataset for the current epoch.
  const std::vector<size_t>& permutation() const { return order_; }
  // One step's batch when `count` workers train: positions [position,
  // position + count * batch) of the permutation form the global batch and
  // the worker at `index` takes position + index + i * count (i < batch),
  // wrapping around at the end of the epoch. With every worker live this is
  // exactly the `batch` indices that indices() gives for that step.
  std::vector<size_t> Batch(uint64_t position, int index, int count, size_t batch) const;
  // One step's slice under --dynamic-slicing (DataParallel::batch_slice()):
  // positions [position + offset, position + offset + count) of the
  // permutation, wrapping around at the end of the epoch. The live workers'
  // slices together are the same global batch as Batch()'s.
  std::vector<size_t> Slice(uint64_t position, uint64_t offset, uint64_t count) const;
  // The indices at `positions` of the current epoch's permutation (each
  // taken modulo the dataset size).
  std::vector<size_t> At(const std::vector<uint64_t>& positions) const;
  size_t num_samples() const;  // per worker

 private:
  size_t size_;
  int rank_, world_;
  bool shuffle_, drop_last_;
  uint64_t seed_, epoch_ = 0;
  std::vector<size_t> order_;  // permutation of epoch_
};

}  // namespace een
