// A TraceReport (schema/een.capnp: every process's data-path events, in the
// coordinator's clock) as ONE Chrome trace-event JSON file, for
// ui.perfetto.dev or chrome://tracing: a process track per worker and PS,
// a thread track per kind of work (a worker's compute and sync, pushes,
// pull answers; a PS's pushes received, applies, backups confirmed, pulls
// answered), and flow arrows along each gradient's way: a worker's push ->
// the PS receiving it -> the chunk applied -> the pull answered -> the
// worker receiving the fresh values.
// Also the step breakdown per worker (StepBreakdown) that `eenctl debug
// --plot` draws: compute, push, wait and pull time of each step.
#pragma once

#include <string>
#include <vector>

#include "common/flight_recorder.h"
#include "schema/een.capnp.h"

namespace een {

// A TraceReport read once into plain values (a Cap'n Proto reader counts
// every read against the message's traversal limit; a trace reads its
// events several times).
struct TraceData {
  struct Process {
    bool ps = false;
    int rank = 0, pid = 0;
    std::string host;
    uint64_t dropped = 0;
    std::vector<RecordedEvent> events;  // the coordinator's clock
  };
  struct ChunkName {
    std::string tensor;
    uint64_t begin = 0, end = 0;
  };
  uint64_t first_step = 0, last_step = 0;
  std::vector<Process> processes;
  std::vector<ChunkName> chunks;  // by chunk id
  std::string note, reason;

  static TraceData FromWire(wire::TraceReport::Reader report);
};

std::string ChromeTraceJson(const TraceData& trace);

struct StepTimes {
  int worker = 0;
  uint64_t step = 0;
  double begin_ms = 0;  // the step's compute began (the coordinator's clock, ms)
  double compute_ms = 0, push_ms = 0, wait_ms = 0, pull_ms = 0;
};
// Each worker's steps of the report, whole ones only (compute from the end
// of the previous sync; push: the sync until its last push was sent; pull:
// from the first pull answer received to the sync's end; wait: the rest).
std::vector<StepTimes> StepBreakdown(const TraceData& trace);

}  // namespace een
