// Liveness: when a process's silence means it is lost.
//
// The coordinator keeps one per PS and worker. Heard() takes each heartbeat;
// Lost() says whether the silence since the last one is past the process's
// allowance. The allowance is the configured failover threshold, raised for
// a process whose heartbeats have lately arrived irregularly (a busy
// machine, not a dead process): the mean of its last heartbeat gaps plus six
// of their standard deviations (phi accrual, Hayashibara et al. 2004, with a
// normal model), never below the threshold and never above three times it,
// so a real loss is declared within 3x the threshold at most. Time the
// coordinator itself did not listen (its loop stalled: a slow disk, the
// scheduler) is forgiven with Forgive(): that silence is not the process's.
// Past its allowance, the coordinator still asks /proc (process_sighting.h):
// a process of its own machine still running there is given up to
// kRunningSilenceFactor thresholds; gone, stopped or hung, it is lost.
// Thread safety: none; the coordinator's one thread owns it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>

namespace een {

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSigmas = 6;
  static constexpr int kMaxFactor = 3;  // the allowance is at most 3x the threshold
  // A process of the coordinator's machine still seen running there
  // (process_sighting.h) is given up to this many thresholds of silence.
  static constexpr int kRunningSilenceFactor = 10;

  // Silence counts from `now` (registration, a restart, a rebuild); the gap
  // from the last heartbeat before it says nothing about the process.
  void Restart(Clock::time_point now);
  // A heartbeat arrived at `now`.
  void Heard(Clock::time_point now);
  // The coordinator did not listen for `stall`: that silence is not counted.
  void Forgive(Clock::duration stall) { last_ += stall; }

  long SilentMs(Clock::time_point now) const;
  // The silence this process is allowed before it counts as lost.
  long AllowanceMs(std::chrono::milliseconds threshold) const;
  bool Lost(Clock::time_point now, std::chrono::milliseconds threshold) const {
    return SilentMs(now) > AllowanceMs(threshold);
  }

 private:
  static constexpr size_t kWindow = 32;  // heartbeat gaps remembered
  Clock::time_point last_ = Clock::now();
  bool counting_ = false;  // last_ is a heartbeat: the next one gives a gap
  std::array<double, kWindow> gaps_ms_{};
  size_t gaps_ = 0;  // recorded so far (the window holds min(gaps_, kWindow))
};

}  // namespace een
