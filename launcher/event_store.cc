#include "launcher/event_store.h"

#include <algorithm>
#include <limits>

namespace een {

Status EventStore::Add(wire::Role role, int rank, int pid, const std::string& host,
                       int64_t offset_us, capnp::List<wire::TraceEvent>::Reader events,
                       uint64_t dropped) {
  if (events.size() > FlightRecorder::kMaxPending) {
    return InvalidArgument("a heartbeat carries " + std::to_string(events.size()) +
                           " events, more than " + std::to_string(FlightRecorder::kMaxPending));
  }
  // Steady-clock times in [0, 2^60) us (36,000 years) and offsets within
  // as much: shifted times and any difference of two stay far from overflow.
  constexpr int64_t kLimit = int64_t{1} << 60;
  if (offset_us > kLimit || offset_us < -kLimit) return InvalidArgument("bad clock offset");
  for (auto e : events) {
    if (e.getKind() >= static_cast<uint8_t>(EventKind::kCount) ||
        e.getEndMicros() < e.getBeginMicros() || e.getBeginMicros() < 0 ||
        e.getEndMicros() >= kLimit) {
      return InvalidArgument("a heartbeat carries an event of unknown kind or with bad times");
    }
  }
  Process& p = processes_[{static_cast<int>(role), rank, pid}];
  p.host = host;
  p.dropped = dropped;
  for (auto e : events) p.events.push_back(FlightRecorder::FromWire(e, offset_us));
  while (p.events.size() > kMaxEventsPerProcess) {
    p.forgotten_step = std::max(p.forgotten_step, p.events.front().step + 1);
    p.events.pop_front();
  }
  return Status::Ok();
}

size_t EventStore::Count(uint64_t first, uint64_t last) const {
  size_t n = 0;
  for (const auto& [key, p] : processes_) {
    for (const RecordedEvent& e : p.events) n += e.step >= first && e.step <= last;
  }
  return n;
}

uint64_t EventStore::OldestWholeStep() const {
  uint64_t oldest = 0;
  for (const auto& [key, p] : processes_) oldest = std::max(oldest, p.forgotten_step);
  return oldest;
}

void EventStore::ToWire(uint64_t first, uint64_t last, wire::TraceReport::Builder report) const {
  auto list = report.initProcesses(processes_.size());
  size_t i = 0;
  for (const auto& [key, p] : processes_) {
    auto out = list[i++];
    out.setRole(static_cast<wire::Role>(std::get<0>(key)));
    out.setRank(std::get<1>(key));
    out.setPid(std::get<2>(key));
    out.setHost(p.host);
    out.setDropped(p.dropped);
    size_t n = 0;
    for (const RecordedEvent& e : p.events) n += e.step >= first && e.step <= last;
    auto events = out.initEvents(n);
    size_t k = 0;
    for (const RecordedEvent& e : p.events) {
      if (e.step < first || e.step > last) continue;
      FlightRecorder::ToWire(e, events[k++]);
    }
  }
}

}  // namespace een
