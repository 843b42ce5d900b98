// FlightRecorder: what one PS or worker did on the data path, step by step,
// as timed events: a worker's backward, each bucket handed to the client,
// each push sent and each pull answer received; a PS's pushes received,
// chunks applied, backups confirmed and pulls answered. The heartbeat takes
// the events recorded since the last one (TakeNew) to the coordinator, with
// the offset from this process's clock to the coordinator's, and the
// coordinator keeps the last steps of every process: `eenctl debug --trace
// full` and the flight record written when a step stalls or the job fails
// read them there (launcher/event_store.h).
// On by default (a few tens of nanoseconds per event, under a lock shared
// with the heartbeat thread only); EEN_FLIGHT_RECORDER=off turns it off
// (Record() is then one branch), for measuring what it costs.
// Between two heartbeats at most kMaxPending events wait; more are dropped
// and counted (dropped()).
// Thread safety: Record() from any thread; TakeNew() from the heartbeat's.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "schema/een.capnp.h"

namespace een {

// The order is the wire's (TraceEvent.kind): add at the end only.
enum class EventKind : uint8_t {
  kBackward,      // worker: first gradient of the step to Step(); step
  kBucketReady,   // worker: a bucket's gradients all arrived; a = bucket
  kPushSent,      // worker: a = ps, b = first chunk, c = chunks
  kPullReceived,  // worker: the answer to a pull (from its request); step = the step whose
                  // result it carries, a = ps, b = first chunk, c = chunks
  kSync,          // worker: Step(), until the parameters are fresh
  kPushReceived,  // ps: a = worker, b = first chunk, c = chunks
  kApplied,       // ps: a = chunk (its step is complete and applied)
  kReplicated,    // ps: a = chunk (its backup confirmed the step)
  kPullAnswered,  // ps: step = the step whose result it carries, a = worker, b = first chunk,
                  // c = chunks
  kCount
};

struct RecordedEvent {
  int64_t begin_us = 0, end_us = 0;  // the recording process's steady clock
  uint64_t step = 0;
  uint32_t a = 0, b = 0, c = 0;
  EventKind kind = EventKind::kCount;
};

class FlightRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxPending = 1 << 16;

  // Reads EEN_FLIGHT_RECORDER (off: records nothing).
  FlightRecorder();
  explicit FlightRecorder(bool enabled) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  void Record(EventKind kind, uint64_t step, Clock::time_point begin, Clock::time_point end,
              uint32_t a = 0, uint32_t b = 0, uint32_t c = 0);
  void Record(EventKind kind, uint64_t step, Clock::time_point at, uint32_t a = 0, uint32_t b = 0,
              uint32_t c = 0) {
    Record(kind, step, at, at, a, b, c);
  }
  // The events recorded since the last call, oldest first.
  std::vector<RecordedEvent> TakeNew();
  uint64_t dropped() const;

  static void ToWire(const RecordedEvent& e, wire::TraceEvent::Builder out);
  // `shift_us` is added to both times (a peer's clock to ours); the kind is
  // the caller's to check (below kCount).
  static RecordedEvent FromWire(wire::TraceEvent::Reader e, int64_t shift_us = 0);

  static int64_t Micros(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  }

 private:
  const bool enabled_ = true;
  mutable std::mutex mu_;
  std::vector<RecordedEvent> pending_;  // guarded by mu_
  uint64_t dropped_ = 0;                // guarded by mu_
};

}  // namespace een
