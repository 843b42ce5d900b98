// JobCounters: what the coordinator counts about the whole job for eenctl
// status and /metrics: PS losses handled, membership changes, workers
// lost, control messages refused, and a histogram of the workers' sync time
// per step (Prometheus' cumulative buckets).
// Thread safety: none; the coordinator's thread only.
#pragma once

#include <array>
#include <cstdint>

#include "schema/een.capnp.h"

namespace een {

class SyncHistogram {
 public:
  static constexpr std::array<double, 12> kBoundsMs = {1,   2,   5,   10,   20,   50,
                                                       100, 200, 500, 1000, 2000, 5000};
  void Observe(double ms) {
    for (size_t i = 0; i < kBoundsMs.size(); ++i) {
      if (ms <= kBoundsMs[i]) counts_[i]++;
    }
    counts_.back()++;  // +Inf
    sum_ms_ += ms;
  }
  void ToWire(wire::JobStatus::Builder status) const {
    auto bounds = status.initSyncBoundsMs(kBoundsMs.size());
    for (size_t i = 0; i < kBoundsMs.size(); ++i) bounds.set(i, kBoundsMs[i]);
    auto counts = status.initSyncCounts(counts_.size());
    for (size_t i = 0; i < counts_.size(); ++i) counts.set(i, counts_[i]);
    status.setSyncSumMs(sum_ms_);
  }

 private:
  std::array<uint64_t, kBoundsMs.size() + 1> counts_{};  // cumulative; the last: +Inf
  double sum_ms_ = 0;
};

struct JobCounters {
  uint64_t failovers = 0;           // PS declared lost and handled
  uint64_t membership_changes = 0;  // rounds committed
  uint64_t workers_lost = 0;
  uint64_t refused_messages = 0;
  SyncHistogram sync;
};

}  // namespace een
