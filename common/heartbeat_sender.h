// HeartbeatSender: a PS's or worker's link to the coordinator's liveness
// tracking. A background thread sends a Heartbeat every interval on its own
// connection and reads the replies, which carry the job's state. Nothing
// it does waits behind the process's work: the connection is on the
// heartbeat lane (its own device and I/O thread, device.h), and Start()
// raises the priority of the threads it makes when the system allows (root,
// or RLIMIT_NICE; else they run at the process's). It turns
// silence into a state too: a coordinator unheard for 4x the failover
// threshold makes the state kAborted with a reason naming it.
// Every heartbeat carries the role's flight recorder's new events and the
// offset of this process's clock to the coordinator's (its replies carry
// the coordinator's clock). Every heartbeat carries the role's metrics registry (`metrics`, if not
// null; it must outlive the sender), the process's CPU time and resident
// set (process.cpu_micros, process.rss_bytes) and what the role's fill callback adds
// (role, rank, pid, step...).
// Thread safety: state() and reason() may be called from any thread; the
// fill callback runs on the heartbeat thread and must only read atomics or
// its own locked data (Metrics is safe to read from there).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/flight_recorder.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/transport/connection.h"
#include "schema/een.capnp.h"

namespace een {

class HeartbeatSender {
 public:
  enum class State { kRunning, kShutdown, kAborted };
  using Fill = std::function<void(wire::Heartbeat::Builder)>;

  // Connects to the coordinator at `address` on the heartbeat lane and starts.
  // `recorder` (may be null; it must outlive the sender): its new events go
  // with every heartbeat.
  static Result<std::unique_ptr<HeartbeatSender>> Start(const std::string& address,
                                                        std::chrono::milliseconds interval,
                                                        std::chrono::milliseconds threshold,
                                                        const Metrics* metrics, Fill fill,
                                                        FlightRecorder* recorder = nullptr);
  HeartbeatSender(std::unique_ptr<transport::Connection> connection,
                  std::chrono::milliseconds interval, std::chrono::milliseconds threshold,
                  const Metrics* metrics, Fill fill, FlightRecorder* recorder = nullptr);
  ~HeartbeatSender();  // stops the thread

  State state() const { return state_.load(); }
  // The coordinator's incarnation from its last reply (0 before any): a
  // change means it restarted, and control requests in flight must be sent again.
  uint64_t incarnation() const { return incarnation_.load(); }
  // The shard map epoch the coordinator serves (0 before any reply).
  uint64_t map_epoch() const { return map_epoch_.load(); }
  std::string reason() const;
  // The coordinator's steady clock minus this process's, in microseconds:
  // from the heartbeat round trip with the least delay in the last minute
  // (its error is at most half that round trip). 0 before any reply.
  int64_t clock_offset_micros() const { return clock_offset_.load(); }
  // The probe round the coordinator asks for (0: none): eenctl status --probe.
  uint64_t probe_round() const { return probe_round_.load(); }
  // Every worker finished: the step of the job's final values (UINT64_MAX: not yet).
  uint64_t final_step() const { return final_step_.load(); }

 private:
  void Loop();
  void SetState(State s, const std::string& reason);

  std::unique_ptr<transport::Connection> connection_;
  std::chrono::milliseconds interval_, threshold_;
  const Metrics* metrics_;
  Fill fill_;
  FlightRecorder* recorder_;
  std::atomic<int64_t> clock_offset_{0};
  std::atomic<uint64_t> probe_round_{0};
  std::atomic<uint64_t> final_step_{UINT64_MAX};
  // Clock offset estimation (the heartbeat thread's own).
  using Clock = std::chrono::steady_clock;
  void NoteRoundTrip(Clock::time_point sent, Clock::time_point received, int64_t coordinator_us);
  struct OffsetSample {
    int64_t round_trip_us = INT64_MAX, offset_us = 0;
    Clock::time_point at;
  };
  OffsetSample best_offset_;
  std::atomic<State> state_{State::kRunning};
  std::atomic<uint64_t> incarnation_{0};
  std::atomic<uint64_t> map_epoch_{0};
  mutable std::mutex mu_;
  std::string reason_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace een
