// SliceBalancer: the arithmetic of --dynamic-slicing auto (the
// coordinator's).
//
// Each worker's heartbeat says how long its last step's compute took (its
// time outside Step()) and how many samples its slice of the global batch
// had. A step's compute is modelled as fixed + n * per_sample: a cost
// every step pays whatever its slice (framework overhead, a small batch's
// poor use of the hardware), the same on every worker, plus the worker's
// own cost per sample. The balancer keeps, per worker, a moving average of
// its compute at its current share; when shares change, each worker's
// averages at its old and new share give a line, whose intercepts (their
// median, over the workers whose share changed by a quarter or more: a
// few samples' difference is mostly noise) estimate the fixed cost.
//
// Propose() shares the global batch out in proportion to each live
// worker's speed per sample beyond the fixed cost (ProportionalShares:
// rounded so that the slowest predicted compute is shortest, at least one
// sample each), which makes their predicted computes equal. It does so
// only once every live worker was measured `settle` times since the
// shares last changed, and only when that shortens the slowest worker's
// predicted compute by at least `min_gain`; the change right after such
// a large one may gain as little as `refine_gain` (the first shares come
// from a single share per worker, before the fixed cost is known, and can
// be a sample or two off). After a refinement small gains wait again:
// each change is a membership round, so noise must not make shares flap.
// A worker that slows down or recovers moves its average, and the shares
// follow it (a worker with a small slice is not taken for a slow one
// because its fixed cost is spread over few samples).
//
// It also notices misuse: workers asking batch_slice() for different
// global batches, and workers that never call it.
// Thread safety: none; the coordinator's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace een {

class SliceBalancer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    double min_gain = 0.1;      // of the predicted step's compute
    double refine_gain = 0.02;  // the same, for the change right after a large one
    int settle = 20;            // measurements of each worker since the last change
    double smoothing = 0.2;     // weight of the newest measurement in the average
  };
  SliceBalancer() = default;
  explicit SliceBalancer(Options options) : options_(options) {}

  // Worker `rank`'s heartbeat: its step `step` computed for `compute_micros`
  // over `samples` samples of a global batch of `global_batch` (0: it has
  // not sliced yet). A step seen already is not counted twice.
  void Observe(int rank, uint64_t step, uint64_t compute_micros, uint32_t samples,
               uint32_t global_batch);
  // New shares for the workers `live` (ascending ranks) that now train
  // `current` (in their order; empty: equal shares), or nothing.
  std::optional<std::vector<uint32_t>> Propose(const std::vector<int>& live,
                                               const std::vector<uint32_t>& current);
  // The shares (or the live workers) changed: each worker's measurements
  // since count from here.
  void Changed();
  // Each live worker's measured samples per second (beyond the fixed
  // cost), for the log.
  std::string Describe(const std::vector<int>& live) const;
  // Live workers that asked batch_slice() for different global batches
  // all through the last `patience` (their slices overlap or leave
  // samples out): what to tell the user, or nothing.
  std::optional<std::string> Disagreement(const std::vector<int>& live, Clock::time_point now,
                                          Clock::duration patience);
  // Once every live worker is past step `after`: those that never called
  // batch_slice().
  std::vector<int> NeverSliced(const std::vector<int>& live, uint64_t after) const;
  double fixed_micros() const { return fixed_; }
  // Worker `rank`'s measured compute per sample beyond the fixed cost
  // (micros), once it has sliced.
  std::optional<double> MicrosPerSample(int rank) const;

 private:
  struct Measure {
    uint64_t step = 0;
    uint32_t global_batch = 0;
    uint32_t samples = 0;      // of the current share
    double compute = 0;        // moving average at that share (micros)
    int count = 0;             // measurements at that share
    uint32_t old_samples = 0;  // the share before, and its average
    double old_compute = 0;
    int since_change = 0;
  };
  // Per sample beyond the fixed cost (micros), at least a fifth of the whole.
  double Marginal(const Measure& m) const;
  void EstimateFixed();
  Options options_;
  std::map<int, Measure> measures_;
  double fixed_ = 0;  // the estimated fixed cost per step (micros)
  // The next change may be a refinement (the last one was a large
  // proposal), and whether the last proposal was large.
  bool may_refine_ = false;
  bool proposed_large_ = false;
  std::optional<Clock::time_point> disagree_since_;
};

// `total` shared out in proportion to `weights` (each > 0, a worker's
// speed), rounded so that the longest time, share / weight, is as short as
// it can be; each share at least 1 (total >= weights.size()).
std::vector<uint32_t> ProportionalShares(const std::vector<double>& weights, uint32_t total);

}  // namespace een
