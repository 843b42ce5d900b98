// EventStore: the coordinator's flight recorder. Every PS and worker sends,
// with each heartbeat, the data-path events it recorded since the last one
// (common/flight_recorder.h) and the offset of its clock to the
// coordinator's; the store keeps the newest kMaxEventsPerProcess of each
// process (a replaced one's too: the flight record of a failure needs the
// dead), in the coordinator's clock. `eenctl debug --trace full` and the
// flight records written when a step stalls or the job fails read steps
// from it (ToWire).
// Every event from a peer is checked before it is kept: a known kind, an
// end not before its begin, at most FlightRecorder::kMaxPending per
// heartbeat; a list that fails is dropped whole (Add says why).
// Thread safety: none; the coordinator's thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>

#include "common/flight_recorder.h"
#include "common/status.h"
#include "schema/een.capnp.h"

namespace een {

class EventStore {
 public:
  static constexpr size_t kMaxEventsPerProcess = 1 << 15;

  Status Add(wire::Role role, int rank, int pid, const std::string& host, int64_t offset_us,
             capnp::List<wire::TraceEvent>::Reader events, uint64_t dropped);
  // The first step every process that sent events in the last
  // kMaxEventsPerProcess still holds whole (0: all since the start).
  uint64_t OldestWholeStep() const;
  // Each process's events of steps [first, last] into `report.processes`.
  void ToWire(uint64_t first, uint64_t last, wire::TraceReport::Builder report) const;
  bool empty() const { return processes_.empty(); }
  // How many events of steps [first, last] are kept, over every process.
  size_t Count(uint64_t first, uint64_t last) const;

 private:
  struct Process {
    std::string host;
    std::deque<RecordedEvent> events;  // the coordinator's clock
    uint64_t dropped = 0;              // by the process's recorder
    uint64_t forgotten_step = 0;       // newest step of an event pushed out here (+1)
  };
  std::map<std::tuple<int, int, int>, Process> processes_;  // (role, rank, pid)
};

}  // namespace een
