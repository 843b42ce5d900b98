// ProcessRates: one process's CPU use and data-plane bytes per second,
// derived by the coordinator from the running counters its heartbeats
// carry (process.cpu_micros; ps.push_bytes/ps.pull_bytes or
// worker.pull_bytes/worker.push_bytes; a worker's bytes per PS), over a
// window of about `window` (eenctl status, /metrics).
// Rates are zero until a first window has passed; a counter that went
// backwards (a new process took the rank) starts the window again.
// Thread safety: none; the coordinator's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/metrics.h"
#include "schema/een.capnp.h"

namespace een {

class ProcessRates {
 public:
  using Clock = std::chrono::steady_clock;
  struct Bytes {
    double in = 0, out = 0;  // per second
  };

  ProcessRates() = default;
  explicit ProcessRates(std::chrono::milliseconds window) : window_(window) {}

  // A heartbeat's counters, heard at `at`. `traffic`: a worker's bytes per
  // PS; entries for a rank outside [0, num_ps), or past the first num_ps,
  // are a peer's lie and ignored.
  void Note(Clock::time_point at, wire::Role role, const std::vector<MetricSample>& metrics,
            capnp::List<wire::PeerTraffic>::Reader traffic, int num_ps, uint64_t samples = 0);
  void Reset() { *this = ProcessRates(window_); }

  double cpu_percent() const { return cpu_percent_; }
  double samples_per_second() const { return samples_per_second_; }  // a worker's
  const Bytes& bytes() const { return bytes_; }
  // A worker's traffic to and from each PS rank (in: pulled; out: pushed).
  const std::map<int, Bytes>& per_ps() const { return per_ps_; }

 private:
  struct Sample {
    Clock::time_point at;
    double cpu_micros = 0, in = 0, out = 0, samples = 0;
    std::map<int, std::pair<double, double>> per_ps;  // rank -> (in, out) bytes
  };

  std::chrono::milliseconds window_{2000};
  std::optional<Sample> base_;
  double cpu_percent_ = 0, samples_per_second_ = 0;
  Bytes bytes_;
  std::map<int, Bytes> per_ps_;
};

}  // namespace een
