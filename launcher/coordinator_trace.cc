// Coordinator: the job's flight recorder read back. `eenctl debug --trace
// full` asks for steps [A, B] and is answered once every live worker is past
// B; a step that stalls past the failover threshold, or the job failing,
// writes the last kFlightSteps steps to a file. See coordinator.h and
// event_store.h.
#include <unistd.h>

#include <fstream>

#include "common/logging.h"
#include "common/private_file.h"
#include "common/wire.h"
#include "launcher/chrome_trace.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"

namespace een {

void Coordinator::BuildTraceReport(uint64_t first, uint64_t last, const std::string& reason,
                                   wire::TraceReport::Builder report) const {
  report.setFirstStep(first);
  report.setLastStep(last);
  report.setReason(reason);
  events_.ToWire(first, last, report);
  if (map_) {
    auto chunks = report.initChunks(map_->chunks().size());
    for (uint32_t c = 0; c < map_->chunks().size(); ++c) {
      const Chunk& chunk = map_->chunks()[c];
      chunks[c].setTensor(map_->tensors()[chunk.tensor].name);
      chunks[c].setBegin(chunk.offset);
      chunks[c].setEnd(chunk.offset + chunk.numel);
      chunks[c].setPs(static_cast<int32_t>(map_->OwnerOfChunk(c)));
    }
  }
  std::string note;
  if (const uint64_t oldest = events_.OldestWholeStep(); first < oldest) {
    note = fmt::format(
        "steps before {} are no longer whole: the coordinator keeps the newest {} events of "
        "each process",
        oldest, EventStore::kMaxEventsPerProcess);
  }
  uint64_t dropped = 0;
  for (auto p : report.asReader().getProcesses()) dropped += p.getDropped();
  if (dropped > 0) {
    note += fmt::format(
        "{}{} events were dropped by processes that recorded faster than their "
        "heartbeats took them",
        note.empty() ? "" : "; ", dropped);
  }
  report.setNote(note);
}

std::string Coordinator::WriteFlightRecord(uint64_t step, const std::string& reason, bool failed) {
  const uint64_t first = step >= kFlightSteps ? step - kFlightSteps + 1 : 0;
  capnp::MallocMessageBuilder message;
  auto report = message.initRoot<wire::TraceReport>();
  BuildTraceReport(first, step, reason, report);
  // Never through a name planted in a shared folder: a new file, this
  // user's only (0600); the default folder is a new private one.
  if (options_.flight_dir.empty()) {
    auto made = MakePrivateTempFolder("/tmp/een-flight-");
    if (!made.ok()) {
      spdlog::warn("could not write the flight record of steps {}-{}: {} (--flight-dir FOLDER)",
                   first, step, made.status().message());
      return "";
    }
    options_.flight_dir = *made;
  }
  const std::string json = ChromeTraceJson(TraceData::FromWire(report.asReader()));
  // A failed job's record never replaces a stalled step's.
  const std::string name = fmt::format("{}/een-flight-{}-{}step-{}", options_.flight_dir, getpid(),
                                       failed ? "failed-" : "", step);
  std::string path = name + ".json";
  Status written = WriteNewPrivateFile(path, json);
  for (int again = 2;
       !written.ok() && written.code() == StatusCode::kFailedPrecondition && again <= 100;
       ++again) {
    path = fmt::format("{}-{}.json", name, again);  // taken (a restarted coordinator's pid?)
    written = WriteNewPrivateFile(path, json);
  }
  if (!written.ok()) {
    spdlog::warn("could not write the flight record of steps {}-{}: {} (is {} writable?)", first,
                 step, written.message(), options_.flight_dir);
    return "";
  }
  spdlog::warn(
      "flight record of steps {}-{} of every process written to {} (open it in "
      "ui.perfetto.dev): {}",
      first, step, path, reason);
  return path;
}

Status Coordinator::HandleTraceRequest(const transport::PeerId& peer,
                                       wire::TraceRequest::Reader request) {
  const uint64_t first = request.getFirstStep(), last = request.getLastStep();
  if (first > last || last - first >= kMaxTraceSteps) {
    return InvalidArgument(
        fmt::format("steps {}:{}: ask for 1 to {} steps, the first not after "
                    "the last",
                    first, last, kMaxTraceSteps));
  }
  if (state_ != wire::JobState::RUNNING) {
    return FailedPrecondition("the job is not running: there are no steps to trace yet");
  }
  trace_asks_.push_back({.peer = peer, .first = first, .last = last, .asked = Clock::now()});
  MaybeAnswerTraces();
  return Status::Ok();
}

void Coordinator::MaybeAnswerTraces() {
  if (trace_asks_.empty()) return;
  const Clock::time_point now = Clock::now();
  uint64_t slowest = UINT64_MAX;  // the step every live worker has reached
  for (const Node& w : workers_) {
    if (w.active()) slowest = std::min(slowest, w.step);
  }
  for (auto it = trace_asks_.begin(); it != trace_asks_.end();) {
    // Step() returned for `last` once a worker's step is past it.
    if (!it->passed && (slowest == UINT64_MAX || slowest > it->last)) it->passed = now;
    // Their last events come with the next heartbeats.
    const bool ready = it->passed && now - *it->passed > 3 * options_.job.heartbeat_interval;
    const bool ended = state_ != wire::JobState::RUNNING;
    if (!ready && !ended) {
      ++it;
      continue;
    }
    transport::Message answer;
    if (!it->passed) {
      const uint64_t step = NewestWorkerStep();
      answer = wire::MakeError(
          wire::ErrorCode::FAILED_PRECONDITION,
          fmt::format("the job ended at step {}, before every worker passed step {}: nothing to "
                      "trace",
                      step, it->last));
    } else if (events_.Count(it->first, it->last) == 0) {
      answer = wire::MakeError(
          wire::ErrorCode::FAILED_PRECONDITION,
          fmt::format("no events of steps {}:{} are kept any more: the coordinator keeps the "
                      "newest {} events of each process (whole from step {} now); ask for later "
                      "steps",
                      it->first, it->last, EventStore::kMaxEventsPerProcess,
                      events_.OldestWholeStep()));
    } else {
      wire::Outgoing b;
      BuildTraceReport(it->first, it->last, "eenctl debug --trace full",
                       b.header().initTraceReply());
      answer = b.Take();
    }
    Ignored(listener_->Send(it->peer, std::move(answer)), "answering eenctl debug");
    it = trace_asks_.erase(it);
  }
}

}  // namespace een
