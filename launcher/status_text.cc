#include "launcher/status_text.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace een {
namespace {

const char* JobStateName(wire::JobState s) {
  switch (s) {
    case wire::JobState::STARTING:
      return "starting";
    case wire::JobState::RUNNING:
      return "running";
    case wire::JobState::SHUTDOWN:
      return "finished";
    default:
      return "aborted";
  }
}

std::string Who(wire::Role role, int rank) {
  return fmt::format("{} {}", role == wire::Role::PS ? "ps" : "worker", rank);
}

std::string Workers(capnp::List<int32_t>::Reader missing) {
  std::string text = missing.size() == 1 ? "worker " : "workers ";
  for (size_t i = 0; i < missing.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(missing[i]);
  }
  return text;
}

std::string WaitLine(wire::StepWaitReport::Reader w) {
  return fmt::format("step {} waits for {}: chunk {}[{}:{}] on ps {}, {}", w.getStep(),
                     Workers(w.getMissing()), w.getTensor().cStr(), w.getBegin(), w.getEnd(),
                     w.getPs(), Duration(w.getWaitedMs()));
}

}  // namespace

std::string Duration(uint64_t ms) {
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms < 60'000) return fmt::format("{:.1f} s", ms / 1000.0);
  const uint64_t minutes = ms / 60'000;
  if (minutes < 60) return fmt::format("{}m {:02}s", minutes, ms / 1000 % 60);
  return fmt::format("{}h {:02}m", minutes / 60, minutes % 60);
}

std::string Bytes(double bytes) {
  if (bytes < 1e3) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1e6) return fmt::format("{:.1f} KB", bytes / 1e3);
  if (bytes < 1e9) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.2f} GB", bytes / 1e9);
}

std::string StatusText(wire::JobStatus::Reader s) {
  std::string out = fmt::format(
      "job: {} | step {} | {:.0f} samples/s | sync {:.1f} ms | {} | map epoch {} | up {} | {} "
      "ps, {} workers{}\n",
      JobStateName(s.getState()), s.getStep(), s.getSamplesPerSecond(), s.getSyncMs(),
      s.getConsistency().cStr(), s.getMapEpoch(), Duration(s.getUptimeMs()), s.getNumPs(),
      s.getLiveWorkers(),
      s.getLiveWorkers() != s.getNumWorkers() ? fmt::format(" ({} ranks so far)", s.getNumWorkers())
                                              : "");
  const auto waits = s.getWaits();
  if (waits.size() > 0 && waits[0].getWaitedMs() >= kShownWaitMs) {
    out += "waits: " + WaitLine(waits[0]) + "\n";
    for (size_t i = 1; i < waits.size() && waits[i].getWaitedMs() >= kShownWaitMs; ++i) {
      out += "       " + WaitLine(waits[i]) + "\n";
    }
  } else {
    out += fmt::format("waits: nothing (no step has waited {} ms or more for gradients)\n",
                       kShownWaitMs);
  }

  // ssp/async: a last column, each worker's staleness (steps the slowest
  // live worker was behind it at its last pull); --dynamic-slicing, once
  // the shares are not equal: each worker's samples of the global batch.
  const bool stale = std::string(s.getConsistency().cStr()) != "bsp";
  bool sliced = false;
  for (auto p : s.getProcesses()) sliced = sliced || p.getBatchShare() > 0;
  out += fmt::format(
      "\n{:<10} {:<16} {:>8} {:<9} {:>7} {:>8} {:>6} {:>9} {:>11} {:>11} {:>9} "
      "{:>9} {:>9}{}{}\n",
      "PROCESS", "HOST", "PID", "STATE", "STEP", "HEARD", "CPU%", "RSS", "IN/s", "OUT/s", "COMPUTE",
      "SYNC", "STRAGGLER", stale ? fmt::format(" {:>6}", "STALE") : "",
      sliced ? fmt::format(" {:>6}", "SHARE") : "");
  for (auto p : s.getProcesses()) {
    const bool worker = p.getRole() == wire::Role::WORKER;
    out += fmt::format(
        "{:<10} {:<16} {:>8} {:<9} {:>7} {:>8} {:>6.1f} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}{}{}"
        "\n",
        Who(p.getRole(), p.getRank()), p.getHost().cStr(), p.getPid(), p.getState().cStr(),
        p.getStep(), Duration(p.getHeardMsAgo()), p.getCpuPercent(),
        Bytes(static_cast<double>(p.getRssBytes())), Bytes(p.getBytesInPerSec()),
        Bytes(p.getBytesOutPerSec()), worker ? fmt::format("{:.1f} ms", p.getComputeMs()) : "",
        worker ? fmt::format("{:.1f} ms", p.getSyncMs()) : "",
        worker && p.getStragglerScore() > 0 ? fmt::format("{:.2f}", p.getStragglerScore()) : "",
        stale && worker ? fmt::format(" {:>6}", p.getStaleness()) : "",
        sliced && worker ? fmt::format(" {:>6}", p.getBatchShare()) : "");
  }

  if (s.getShards().size() > 0) {
    out +=
        fmt::format("\n{:<10} {:>22} {:>22} {:>12}\n", "SHARDS", "PRIMARY", "BACKUP", "REPL LAG");
    for (auto sh : s.getShards()) {
      out += fmt::format("{:<10} {:>22} {:>22} {:>12}\n", fmt::format("ps {}", sh.getRank()),
                         fmt::format("{} chunks, {}", sh.getPrimaryChunks(),
                                     Bytes(static_cast<double>(sh.getPrimaryBytes()))),
                         fmt::format("{} chunks, {}", sh.getBackupChunks(),
                                     Bytes(static_cast<double>(sh.getBackupBytes()))),
                         fmt::format("{} steps", sh.getReplicationLag()));
    }
  }

  out += "\nTRAFFIC between hosts (data plane, last seconds)\n";
  if (s.getLinks().size() == 0) out += "  none measured yet\n";
  for (auto l : s.getLinks()) {
    out += fmt::format("  {} -> {}{}: {}/s{}\n", l.getFrom().cStr(), l.getTo().cStr(),
                       l.getFrom() == l.getTo() ? " (same host)" : "", Bytes(l.getBytesPerSec()),
                       l.getProbedBytesPerSec() > 0
                           ? fmt::format("; probed {}/s", Bytes(l.getProbedBytesPerSec()))
                           : "");
  }
  return out;
}

std::string StatusJson(wire::JobStatus::Reader s, int indent) {
  using nlohmann::json;
  json processes = json::array(), shards = json::array(), links = json::array(),
       waits = json::array();
  for (auto p : s.getProcesses()) {
    json metrics = json::object();
    for (auto m : p.getMetrics()) metrics[m.getName().cStr()] = m.getValue();
    processes.push_back({{"role", p.getRole() == wire::Role::PS ? "ps" : "worker"},
                         {"rank", p.getRank()},
                         {"pid", p.getPid()},
                         {"host", p.getHost().cStr()},
                         {"state", p.getState().cStr()},
                         {"step", p.getStep()},
                         {"heardMsAgo", p.getHeardMsAgo()},
                         {"cpuPercent", p.getCpuPercent()},
                         {"rssBytes", p.getRssBytes()},
                         {"bytesInPerSec", p.getBytesInPerSec()},
                         {"bytesOutPerSec", p.getBytesOutPerSec()},
                         {"computeMs", p.getComputeMs()},
                         {"syncMs", p.getSyncMs()},
                         {"staleness", p.getStaleness()},
                         {"batchShare", p.getBatchShare()},
                         {"stragglerScore", p.getStragglerScore()},
                         {"metrics", metrics}});
  }
  for (auto sh : s.getShards()) {
    shards.push_back({{"rank", sh.getRank()},
                      {"primaryChunks", sh.getPrimaryChunks()},
                      {"primaryBytes", sh.getPrimaryBytes()},
                      {"backupChunks", sh.getBackupChunks()},
                      {"backupBytes", sh.getBackupBytes()},
                      {"replicationLag", sh.getReplicationLag()}});
  }
  for (auto l : s.getLinks()) {
    links.push_back({{"from", l.getFrom().cStr()},
                     {"to", l.getTo().cStr()},
                     {"bytesPerSec", l.getBytesPerSec()},
                     {"probedBytesPerSec", l.getProbedBytesPerSec()}});
  }
  for (auto w : s.getWaits()) {
    json missing = json::array();
    for (int32_t m : w.getMissing()) missing.push_back(m);
    waits.push_back({{"step", w.getStep()},
                     {"ps", w.getPs()},
                     {"missing", missing},
                     {"tensor", w.getTensor().cStr()},
                     {"begin", w.getBegin()},
                     {"end", w.getEnd()},
                     {"waitedMs", w.getWaitedMs()},
                     {"text", WaitLine(w)}});
  }
  json job = {{"state", JobStateName(s.getState())},
              {"step", s.getStep()},
              {"samplesPerSecond", s.getSamplesPerSecond()},
              {"syncMs", s.getSyncMs()},
              {"consistency", s.getConsistency().cStr()},
              {"mapEpoch", s.getMapEpoch()},
              {"uptimeMs", s.getUptimeMs()},
              {"numPs", s.getNumPs()},
              {"numWorkers", s.getNumWorkers()},
              {"liveWorkers", s.getLiveWorkers()},
              {"failovers", s.getFailovers()},
              {"membershipChanges", s.getMembershipChanges()},
              {"workersLost", s.getWorkersLost()},
              {"refusedMessages", s.getRefusedMessages()}};
  return json{{"job", job},
              {"waits", waits},
              {"processes", processes},
              {"shards", shards},
              {"links", links}}
      .dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace een
