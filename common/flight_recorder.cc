#include "common/flight_recorder.h"

#include <cstdlib>
#include <string>

namespace een {
namespace {

bool EnabledByEnvironment() {
  const char* v = std::getenv("EEN_FLIGHT_RECORDER");
  return !(v && std::string(v) == "off");
}

}  // namespace

FlightRecorder::FlightRecorder() : enabled_(EnabledByEnvironment()) {}

void FlightRecorder::Record(EventKind kind, uint64_t step, Clock::time_point begin,
                            Clock::time_point end, uint32_t a, uint32_t b, uint32_t c) {
  if (!enabled_) return;
  const RecordedEvent e{Micros(begin), Micros(end), step, a, b, c, kind};
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.size() >= kMaxPending) {
    dropped_++;
    return;
  }
  pending_.push_back(e);
}

std::vector<RecordedEvent> FlightRecorder::TakeNew() {
  std::vector<RecordedEvent> taken;
  std::lock_guard<std::mutex> lock(mu_);
  taken.swap(pending_);
  return taken;
}

void FlightRecorder::ToWire(const RecordedEvent& e, wire::TraceEvent::Builder out) {
  out.setKind(static_cast<uint8_t>(e.kind));
  out.setBeginMicros(e.begin_us);
  out.setEndMicros(e.end_us);
  out.setStep(e.step);
  out.setA(e.a);
  out.setB(e.b);
  out.setC(e.c);
}

RecordedEvent FlightRecorder::FromWire(wire::TraceEvent::Reader e, int64_t shift_us) {
  return {e.getBeginMicros() + shift_us,
          e.getEndMicros() + shift_us,
          e.getStep(),
          e.getA(),
          e.getB(),
          e.getC(),
          static_cast<EventKind>(e.getKind())};
}

uint64_t FlightRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace een
