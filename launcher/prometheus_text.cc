#include "launcher/prometheus_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

namespace een {
namespace {

std::string Escaped(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Collects samples per metric name, so each family is written once with
// its HELP and TYPE lines, as the format asks.
class Page {
 public:
  void Add(const std::string& name, const std::string& type, const std::string& help,
           const std::string& labels, double value) {
    Family& f = families_[name];
    if (f.type.empty()) {
      f.type = type;
      f.help = help;
      order_.push_back(name);
    }
    f.lines.push_back(fmt::format("{}{} {}", name, labels.empty() ? "" : "{" + labels + "}",
                                  fmt::format("{}", value)));
  }
  void AddRaw(const std::string& name, const std::string& type, const std::string& help,
              std::vector<std::string> lines) {
    Family& f = families_[name];
    f.type = type;
    f.help = help;
    order_.push_back(name);
    f.lines = std::move(lines);
  }
  std::string Text() const {
    std::string out;
    for (const std::string& name : order_) {
      const Family& f = families_.at(name);
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, f.type);
      for (const std::string& line : f.lines) out += line + "\n";
    }
    return out;
  }

 private:
  struct Family {
    std::string type, help;
    std::vector<std::string> lines;
  };
  std::map<std::string, Family> families_;
  std::vector<std::string> order_;
};

}  // namespace

std::string PrometheusText(wire::JobStatus::Reader s) {
  Page page;
  page.Add("een_step", "gauge", "The first live worker's step.", "",
           static_cast<double>(s.getStep()));
  page.Add("een_samples_per_second", "gauge", "Samples trained per second by every worker.", "",
           s.getSamplesPerSecond());
  page.Add("een_uptime_seconds", "gauge", "Time since the coordinator started.", "",
           s.getUptimeMs() / 1000.0);
  page.Add("een_map_epoch", "gauge", "The shard map's epoch (grows when shards move).", "",
           static_cast<double>(s.getMapEpoch()));
  page.Add("een_failovers_total", "counter", "PS losses handled (failover or rollback).", "",
           static_cast<double>(s.getFailovers()));
  page.Add("een_membership_changes_total", "counter", "Worker membership changes committed.", "",
           static_cast<double>(s.getMembershipChanges()));
  page.Add("een_workers_lost_total", "counter", "Workers declared lost.", "",
           static_cast<double>(s.getWorkersLost()));
  page.Add("een_coordinator_refused_messages_total", "counter",
           "Control messages the coordinator refused.", "",
           static_cast<double>(s.getRefusedMessages()));
  double waiting = 0;
  if (s.getWaits().size() > 0) waiting = s.getWaits()[0].getWaitedMs() / 1000.0;
  page.Add("een_waiting_step_seconds", "gauge",
           "How long the step waiting longest has waited for some workers' gradients.", "",
           waiting);

  // The sync-time histogram, in seconds.
  std::vector<std::string> lines;
  const auto bounds = s.getSyncBoundsMs();
  const auto counts = s.getSyncCounts();
  if (counts.size() == bounds.size() + 1) {
    for (size_t i = 0; i < bounds.size(); ++i) {
      lines.push_back(
          fmt::format("een_sync_seconds_bucket{{le=\"{:g}\"}} {}", bounds[i] / 1000.0, counts[i]));
    }
    lines.push_back(
        fmt::format("een_sync_seconds_bucket{{le=\"+Inf\"}} {}", counts[bounds.size()]));
    lines.push_back(fmt::format("een_sync_seconds_sum {}", s.getSyncSumMs() / 1000.0));
    lines.push_back(fmt::format("een_sync_seconds_count {}", counts[bounds.size()]));
    page.AddRaw("een_sync_seconds", "histogram",
                "Workers' sync time per step (Step() until the parameters are fresh).", lines);
  }

  for (auto p : s.getProcesses()) {
    const bool ps = p.getRole() == wire::Role::PS;
    const std::string labels =
        fmt::format("role=\"{}\",rank=\"{}\",host=\"{}\"", ps ? "ps" : "worker", p.getRank(),
                    Escaped(p.getHost().cStr()));
    const std::string state = p.getState().cStr();
    page.Add("een_process_up", "gauge", "1 while the process takes part in the job.", labels,
             state == "running" || state == "starting" || state == "joining" ? 1 : 0);
    page.Add("een_process_step", "gauge", "The step the process reached.", labels,
             static_cast<double>(p.getStep()));
    page.Add("een_process_heartbeat_age_seconds", "gauge", "Since its last heartbeat.", labels,
             p.getHeardMsAgo() / 1000.0);
    page.Add("een_process_cpu_ratio", "gauge", "CPU time per second (1: one core busy).", labels,
             p.getCpuPercent() / 100);
    page.Add("een_process_resident_bytes", "gauge", "Resident memory.", labels,
             static_cast<double>(p.getRssBytes()));
    page.Add("een_process_receive_bytes_per_second", "gauge", "Data-plane bytes in per second.",
             labels, p.getBytesInPerSec());
    page.Add("een_process_transmit_bytes_per_second", "gauge", "Data-plane bytes out per second.",
             labels, p.getBytesOutPerSec());
    if (!ps) {
      page.Add("een_worker_compute_seconds", "gauge", "Last step's time outside Step().", labels,
               p.getComputeMs() / 1000.0);
      page.Add("een_worker_straggler_score", "gauge",
               "Compute time relative to the workers' median (1: typical).", labels,
               p.getStragglerScore());
      page.Add("een_worker_batch_share", "gauge",
               "--dynamic-slicing: samples of each global batch (0: equal shares).", labels,
               static_cast<double>(p.getBatchShare()));
    }
    for (auto m : p.getMetrics()) {
      std::string name = m.getName().cStr();
      if (name.rfind("process.", 0) == 0) continue;  // shown above
      std::replace(name.begin(), name.end(), '.', '_');
      name = "een_" + name;
      if (m.getCounter()) name += "_total";
      page.Add(name, m.getCounter() ? "counter" : "gauge",
               fmt::format("The process's own {} '{}'.", m.getCounter() ? "counter" : "gauge",
                           m.getName().cStr()),
               labels, m.getValue());
    }
  }

  for (auto sh : s.getShards()) {
    const std::string rank = fmt::format("rank=\"{}\"", sh.getRank());
    page.Add("een_ps_shard_chunks", "gauge", "Chunks a PS holds, as primary or backup.",
             rank + ",kind=\"primary\"", sh.getPrimaryChunks());
    page.Add("een_ps_shard_chunks", "gauge", "", rank + ",kind=\"backup\"", sh.getBackupChunks());
    page.Add("een_ps_shard_bytes", "gauge", "Bytes of fp32 values a PS holds.",
             rank + ",kind=\"primary\"", static_cast<double>(sh.getPrimaryBytes()));
    page.Add("een_ps_shard_bytes", "gauge", "", rank + ",kind=\"backup\"",
             static_cast<double>(sh.getBackupBytes()));
    page.Add("een_ps_replication_lag_steps", "gauge",
             "Steps the PS's applied chunks are ahead of what their backups confirmed.", rank,
             static_cast<double>(sh.getReplicationLag()));
  }
  for (auto l : s.getLinks()) {
    page.Add("een_link_bytes_per_second", "gauge",
             "Data-plane traffic from one host to another (workers' pushes and pulls).",
             fmt::format("from=\"{}\",to=\"{}\"", Escaped(l.getFrom().cStr()),
                         Escaped(l.getTo().cStr())),
             l.getBytesPerSec());
    if (l.getProbedBytesPerSec() > 0) {
      page.Add("een_link_probed_bytes_per_second", "gauge",
               "What the last eenctl status --probe measured from one host to another.",
               fmt::format("from=\"{}\",to=\"{}\"", Escaped(l.getFrom().cStr()),
                           Escaped(l.getTo().cStr())),
               l.getProbedBytesPerSec());
    }
  }
  return page.Text();
}

}  // namespace een
