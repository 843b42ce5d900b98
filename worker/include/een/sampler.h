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

namespace een {

class DistributedSampler {
 public:
  DistributedSampler(size_t dataset_size, int rank, int world_size, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  // This worker's indices for the current epoch, in order.
  std::vector<size_t> indices() const;
  // The shuffled order of the whole dataset for the current epoch.
  std::vector<size_t> permutation() const;
  size_t num_samples() const;  // per worker

 private:
  size_t size_;
  int rank_, world_;
  bool shuffle_, drop_last_;
  uint64_t seed_, epoch_ = 0;
};

}  // namespace een
