// SliceBalancer: the arithmetic of --dynamic-slicing auto (the
// coordinator's).
//
// Each worker's heartbeat says how long its last step's compute took (its
// time outside Step()) and how many samples its slice of the global batch
// had; the balancer keeps each worker's time per sample, a moving average
// over the steps it saw. Propose() shares the global batch out in
// proportion to each live worker's speed (1 / time per sample; largest
// remainders, at least one sample each), and does so only when that
// shortens the slowest worker's predicted compute by at least `min_gain`
// of it, and once every live worker was measured `settle` times since the
// shares last changed (so one noisy step moves nothing, and a change is
// seen before the next). A worker that slows down or recovers moves its
// average, and the shares follow it.
// Thread safety: none; the coordinator's thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace een {

class SliceBalancer {
 public:
  struct Options {
    double min_gain = 0.05;  // of the predicted step's compute
    int settle = 5;          // measurements of each worker since the last change
    double smoothing = 0.3;  // weight of the newest measurement in the average
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
                                               const std::vector<uint32_t>& current) const;
  // The shares (or the live workers) changed: each worker's measurements
  // since count from here (its average is kept: a time per sample).
  void Changed();
  // Each live worker's measured samples per second, for the log.
  std::string Describe(const std::vector<int>& live) const;

 private:
  struct Measure {
    uint64_t step = 0;
    double micros_per_sample = 0;
    int since_change = 0;
    uint32_t global_batch = 0;
  };
  Options options_;
  std::map<int, Measure> measures_;
};

// `total` shared out in proportion to `weights` (each > 0): largest
// remainders, each share at least 1 (total >= weights.size()).
std::vector<uint32_t> ProportionalShares(const std::vector<double>& weights, uint32_t total);

}  // namespace een
