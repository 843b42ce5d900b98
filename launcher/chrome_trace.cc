#include "launcher/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/flight_recorder.h"

namespace een {
namespace {

using nlohmann::json;

struct Track {
  int tid;
  const char* name;
};

// Where each kind of event goes, and its name.
struct KindInfo {
  const char* name;
  Track track;
};

KindInfo InfoOf(EventKind kind) {
  switch (kind) {
    case EventKind::kBackward:
      return {"backward", {1, "compute"}};
    case EventKind::kBucketReady:
      return {"bucket ready", {1, "compute"}};
    case EventKind::kSync:
      return {"sync (Step)", {2, "sync"}};
    case EventKind::kPushSent:
      return {"push", {3, "pushes"}};
    case EventKind::kPullReceived:
      return {"pull answer", {4, "pull answers"}};
    case EventKind::kPushReceived:
      return {"push received", {1, "pushes received"}};
    case EventKind::kApplied:
      return {"applied", {2, "applied"}};
    case EventKind::kReplicated:
      return {"backup confirmed", {3, "backups confirmed"}};
    case EventKind::kPullAnswered:
      return {"pull answered", {4, "pulls answered"}};
    default:
      return {"?", {9, "?"}};
  }
}

std::string ChunkText(const TraceData& trace, uint32_t chunk, uint32_t count) {
  if (chunk >= trace.chunks.size()) return fmt::format("chunk {}", chunk);
  const TraceData::ChunkName& c = trace.chunks[chunk];
  return fmt::format("{}[{}:{}]{}", c.tensor, c.begin, c.end,
                     count > 1 ? fmt::format(" +{} chunks", count - 1) : "");
}

// Where a flow arrow starts or ends: a slice's process, track and time.
struct End {
  int pid = 0, tid = 0;
  double ts = 0;
};
// (ps rank, worker rank, step, first chunk); applies use worker -1.
using Key = std::tuple<int, int, uint64_t, uint32_t>;

}  // namespace

TraceData TraceData::FromWire(wire::TraceReport::Reader report) {
  TraceData t;
  t.first_step = report.getFirstStep();
  t.last_step = report.getLastStep();
  t.note = report.getNote().cStr();
  t.reason = report.getReason().cStr();
  for (auto c : report.getChunks())
    t.chunks.push_back({c.getTensor().cStr(), c.getBegin(), c.getEnd()});
  for (auto p : report.getProcesses()) {
    Process& out = t.processes.emplace_back();
    out.ps = p.getRole() == wire::Role::PS;
    out.rank = p.getRank();
    out.pid = p.getPid();
    out.host = p.getHost().cStr();
    out.dropped = p.getDropped();
    for (auto e : p.getEvents()) {
      RecordedEvent event = FlightRecorder::FromWire(e);
      if (event.kind >= EventKind::kCount) continue;  // the coordinator sends known kinds only
      out.events.push_back(event);
    }
  }
  return t;
}

std::string ChromeTraceJson(const TraceData& trace) {
  json events = json::array();
  int64_t origin = INT64_MAX;
  for (const auto& p : trace.processes) {
    for (const RecordedEvent& e : p.events) origin = std::min(origin, e.begin_us);
  }
  if (origin == INT64_MAX) origin = 0;
  std::vector<std::pair<Key, End>> pushes;  // (ps, worker, step, chunk) as sent
  std::map<Key, End> received, applied, answered, pulled;
  int pid = 0;
  for (const auto& p : trace.processes) {
    ++pid;
    const bool ps = p.ps;
    const int rank = p.rank;
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"args",
                       {{"name", fmt::format("{} {} (host {}, pid {})", ps ? "ps" : "worker", rank,
                                             p.host, p.pid)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"args", {{"sort_index", (ps ? 1000 : 0) + rank}}}});
    std::map<int, const char*> threads;
    for (const RecordedEvent& e : p.events) {
      const EventKind kind = e.kind;
      const KindInfo info = InfoOf(kind);
      threads[info.track.tid] = info.track.name;
      const double ts = static_cast<double>(e.begin_us - origin);
      double dur = static_cast<double>(e.end_us - e.begin_us);
      json args = {{"step", e.step}};
      std::string name = info.name;
      double slice_ts = ts;
      switch (kind) {
        case EventKind::kBucketReady:
          args["bucket"] = e.a;
          break;
        case EventKind::kPushSent:
          args["ps"] = e.a;
          args["chunks"] = ChunkText(trace, e.b, e.c);
          pushes.push_back({{static_cast<int>(e.a), rank, e.step, e.b}, {pid, info.track.tid, ts}});
          break;
        case EventKind::kPushReceived:
          args["worker"] = e.a;
          args["chunks"] = ChunkText(trace, e.b, e.c);
          received[{rank, static_cast<int>(e.a), e.step, e.b}] = {pid, info.track.tid, ts};
          break;
        case EventKind::kApplied:
          args["chunk"] = ChunkText(trace, e.a, 1);
          applied[{rank, -1, e.step, e.a}] = {pid, info.track.tid, ts};
          break;
        case EventKind::kReplicated:
          args["chunk"] = ChunkText(trace, e.a, 1);
          break;
        case EventKind::kPullAnswered:
          // The slice is the answer itself; it waited (queued) since its begin.
          args["worker"] = e.a;
          args["chunks"] = ChunkText(trace, e.b, e.c);
          args["queued_ms"] = dur / 1000;
          slice_ts = static_cast<double>(e.end_us - origin);
          dur = 0;
          answered[{rank, static_cast<int>(e.a), e.step, e.b}] = {pid, info.track.tid, slice_ts};
          break;
        case EventKind::kPullReceived:
          args["ps"] = e.a;
          args["chunks"] = ChunkText(trace, e.b, e.c);
          args["waited_ms"] = dur / 1000;
          slice_ts = static_cast<double>(e.end_us - origin);
          dur = 0;
          pulled[{static_cast<int>(e.a), rank, e.step, e.b}] = {pid, info.track.tid, slice_ts};
          break;
        default:
          break;
      }
      events.push_back({{"ph", "X"},
                        {"name", name},
                        {"cat", "een"},
                        {"pid", pid},
                        {"tid", info.track.tid},
                        {"ts", slice_ts},
                        {"dur", std::max(dur, 1.0)},
                        {"args", args}});
    }
    for (const auto& [tid, name] : threads) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", tid},
                        {"args", {{"name", name}}}});
    }
  }
  // The arrows: push -> received -> applied -> answered -> pull answer received.
  uint64_t id = 0;
  auto flow = [&](const char* name, const End& from, const End& to) {
    ++id;
    events.push_back({{"ph", "s"},
                      {"name", name},
                      {"cat", "flow"},
                      {"id", id},
                      {"pid", from.pid},
                      {"tid", from.tid},
                      {"ts", from.ts}});
    events.push_back({{"ph", "f"},
                      {"bp", "e"},
                      {"name", name},
                      {"cat", "flow"},
                      {"id", id},
                      {"pid", to.pid},
                      {"tid", to.tid},
                      {"ts", to.ts}});
  };
  for (const auto& [key, from] : pushes) {
    if (auto to = received.find(key); to != received.end()) flow("push", from, to->second);
  }
  for (const auto& [key, from] : received) {
    const auto& [ps, worker, step, chunk] = key;
    if (auto to = applied.find({ps, -1, step, chunk}); to != applied.end()) {
      flow("apply", from, to->second);
    }
  }
  for (const auto& [key, to] : answered) {
    const auto& [ps, worker, step, chunk] = key;
    if (auto from = applied.find({ps, -1, step, chunk}); from != applied.end()) {
      flow("answer", from->second, to);
    }
    if (auto end = pulled.find(key); end != pulled.end()) flow("pull", to, end->second);
  }
  json out = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"firstStep", trace.first_step},
                {"lastStep", trace.last_step},
                {"note", trace.note},
                {"reason", trace.reason}}}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace een

namespace een {

std::vector<StepTimes> StepBreakdown(const TraceData& trace) {
  std::vector<StepTimes> out;
  for (const auto& p : trace.processes) {
    if (p.ps) continue;
    struct Step {
      int64_t sync_begin = 0, sync_end = 0, last_push = 0, first_pull = INT64_MAX;
      bool synced = false;
    };
    std::map<uint64_t, Step> steps;
    for (const RecordedEvent& e : p.events) {
      Step& s = steps[e.step];
      switch (e.kind) {
        case EventKind::kSync:
          s.sync_begin = e.begin_us;
          s.sync_end = e.end_us;
          s.synced = true;
          break;
        case EventKind::kPushSent:
          s.last_push = std::max(s.last_push, e.end_us);
          break;
        case EventKind::kPullReceived:
          s.first_pull = std::min(s.first_pull, e.end_us);
          break;
        default:
          break;
      }
    }
    for (const auto& [step, s] : steps) {
      const auto before = steps.find(step - 1);
      if (!s.synced || step == 0 || before == steps.end() || !before->second.synced) continue;
      const double sync = (s.sync_end - s.sync_begin) / 1000.0;
      const double push = std::clamp((s.last_push - s.sync_begin) / 1000.0, 0.0, sync);
      const double pull =
          s.first_pull == INT64_MAX
              ? 0
              : std::clamp((s.sync_end - std::max(s.first_pull, s.sync_begin)) / 1000.0, 0.0,
                           sync - push);
      out.push_back({.worker = p.rank,
                     .step = step,
                     .begin_ms = before->second.sync_end / 1000.0,
                     .compute_ms = (s.sync_begin - before->second.sync_end) / 1000.0,
                     .push_ms = push,
                     .wait_ms = sync - push - pull,
                     .pull_ms = pull});
    }
  }
  return out;
}

}  // namespace een
