// Coordinator: how the job stands, for `eenctl status` and the /metrics
// page: the job, every process, every PS's shards, traffic between hosts
// and what the current step waits for. See coordinator.h.
#include <algorithm>
#include <map>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"
#include "launcher/prometheus_text.h"

namespace een {
namespace {

const char* StateName(bool starting, bool lost, bool done, bool drained, bool joining) {
  if (lost) return "lost";
  if (drained) return "drained";
  if (done) return "finished";
  if (joining) return "joining";
  return starting ? "starting" : "running";
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

}  // namespace

std::optional<Coordinator::Node::Wait> Coordinator::WaitOf(wire::StepWait::Reader wait,
                                                           Clock::time_point now) const {
  if (!map_ || wait.getChunk() >= map_->chunks().size()) return std::nullopt;
  const auto missing = wait.getMissing();
  if (missing.size() == 0 || missing.size() > workers_.size()) return std::nullopt;
  // A wait longer than a year is a lie; kept below it, sums cannot overflow.
  constexpr uint64_t kYearMs = 366ull * 24 * 3600 * 1000;
  Node::Wait w{.step = wait.getStep(),
               .chunk = wait.getChunk(),
               .waited_ms = std::min(wait.getWaitedMs(), kYearMs),
               .heard = now};
  for (int32_t worker : missing) {
    if (worker < 0 || worker >= static_cast<int>(workers_.size())) return std::nullopt;
    w.missing.push_back(worker);
  }
  return w;
}

void Coordinator::BuildStatus(wire::JobStatus::Builder status) const {
  const Clock::time_point now = Clock::now();
  std::vector<int> live;  // registered workers still training
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (workers_[w].active()) live.push_back(static_cast<int>(w));
  }
  const Node* lead = live.empty() ? nullptr : &workers_[live.front()];
  double samples_per_second = 0;
  // A worker's straggler score: its compute over the others' median (with
  // two workers, over all of them would put both halfway). Under dynamic
  // slicing a slow worker's compute is cut to the others' by a smaller
  // slice: there its compute per sample is compared (beyond the fixed cost
  // every step pays, as the balancer measures it).
  const bool per_sample = options_.job.dynamic_slicing == "auto";
  std::vector<std::pair<int, double>> computes;  // live workers' (rank, ms per step or sample)
  for (int w : live) {
    samples_per_second += workers_[w].rates.samples_per_second();
    if (per_sample) {
      if (auto micros = slices_.MicrosPerSample(w)) computes.push_back({w, *micros / 1000.0});
    } else if (workers_[w].compute_micros > 0) {
      computes.push_back({w, workers_[w].compute_micros / 1000.0});
    }
  }
  auto others_median = [&](int rank) {
    std::vector<double> others;
    for (const auto& [w, ms] : computes) {
      if (w != rank) others.push_back(ms);
    }
    return Median(others);
  };
  auto own = [&](int rank) {
    for (const auto& [w, ms] : computes) {
      if (w == rank) return ms;
    }
    return 0.0;
  };
  status.setState(state_);
  status.setStep(lead ? lead->step : 0);
  status.setSamplesPerSecond(samples_per_second);
  status.setSyncMs(lead ? lead->sync_micros / 1000.0 : 0);
  status.setConsistency(options_.job.consistency);
  status.setMapEpoch(map_epoch_);
  status.setUptimeMs(static_cast<uint64_t>(MillisSince(created_)));
  status.setNumPs(static_cast<int32_t>(ps_.size()));
  status.setNumWorkers(static_cast<int32_t>(workers_.size()));
  status.setLiveWorkers(static_cast<int32_t>(live.size()));
  status.setFailovers(counters_.failovers);
  status.setMembershipChanges(counters_.membership_changes);
  status.setWorkersLost(counters_.workers_lost);
  status.setRefusedMessages(counters_.refused_messages);
  counters_.sync.ToWire(status);

  std::vector<const Node*> known;
  for (const std::vector<Node>* nodes : {&ps_, &workers_}) {
    for (const Node& n : *nodes) {
      if (n.registered) known.push_back(&n);
    }
  }
  auto processes = status.initProcesses(known.size());
  for (size_t i = 0; i < known.size(); ++i) {
    const Node& n = *known[i];
    auto p = processes[i];
    p.setRole(n.role);
    p.setRank(n.rank);
    p.setPid(n.pid);
    p.setHost(n.host);
    p.setState(
        n.slow && n.active()
            ? "slow"  // silent past its allowance, but still running on this host
            : StateName(state_ == wire::JobState::STARTING, n.lost, n.done, n.drained, n.joining));
    p.setStep(n.step);
    p.setHeardMsAgo(static_cast<uint64_t>(std::max(0L, n.liveness.SilentMs(now))));
    // A process that left has no rates now (its last heartbeat's are stale).
    const bool gone = n.lost || n.done;
    p.setCpuPercent(gone ? 0 : n.rates.cpu_percent());
    for (const MetricSample& m : n.metrics) {
      if (!gone && m.name == "process.rss_bytes" && m.value >= 0 && m.value < 0x1p63) {
        p.setRssBytes(static_cast<uint64_t>(m.value));
      }
    }
    p.setBytesInPerSec(gone ? 0 : n.rates.bytes().in);
    p.setBytesOutPerSec(gone ? 0 : n.rates.bytes().out);
    if (n.role == wire::Role::WORKER) {
      p.setComputeMs(n.compute_micros / 1000.0);
      p.setSyncMs(n.sync_micros / 1000.0);
      p.setStaleness(n.staleness);
      p.setBatchShare(ShareOf(n.rank));
      const double median = gone ? 0 : others_median(n.rank);
      if (median > 0 && own(n.rank) > 0) p.setStragglerScore(own(n.rank) / median);
    }
    Metrics::ToWire(n.metrics, p.initMetrics(n.metrics.size()));
  }

  // Shards: what each PS holds by the current map.
  if (map_) {
    struct Held {
      uint32_t primary = 0, backup = 0;
      uint64_t primary_bytes = 0, backup_bytes = 0;
    };
    std::vector<Held> held(ps_.size());
    for (uint32_t c = 0; c < map_->chunks().size(); ++c) {
      const uint64_t bytes = uint64_t{map_->chunks()[c].numel} * sizeof(float);
      if (const uint32_t owner = map_->OwnerOfChunk(c); owner < held.size()) {
        held[owner].primary++;
        held[owner].primary_bytes += bytes;
      }
      if (const uint32_t backup = map_->BackupOfChunk(c); backup < held.size()) {
        held[backup].backup++;
        held[backup].backup_bytes += bytes;
      }
    }
    auto shards = status.initShards(ps_.size());
    for (size_t r = 0; r < ps_.size(); ++r) {
      shards[r].setRank(static_cast<int32_t>(r));
      shards[r].setPrimaryChunks(held[r].primary);
      shards[r].setPrimaryBytes(held[r].primary_bytes);
      shards[r].setBackupChunks(held[r].backup);
      shards[r].setBackupBytes(held[r].backup_bytes);
      shards[r].setReplicationLag(ps_[r].replication_lag);
    }
  }

  // Traffic between hosts: every live worker's bytes to and from each PS.
  // And what the newest probe round measured: each worker's link to each
  // PS, the median over the workers of a host pair.
  struct Link {
    double traffic = 0;
    std::vector<double> probed;
  };
  std::map<std::pair<std::string, std::string>, Link> links;
  for (int w : live) {
    const Node& worker = workers_[w];
    for (const auto& [rank, bytes] : worker.rates.per_ps()) {
      if (rank < 0 || rank >= static_cast<int>(ps_.size())) continue;
      const std::string& ps_host = ps_[rank].host;
      links[{worker.host, ps_host}].traffic += bytes.out;
      links[{ps_host, worker.host}].traffic += bytes.in;
    }
    for (const Node::Probe& probe : worker.probes) {
      if (probe.round != probe_round_ || probe.ps >= static_cast<int>(ps_.size())) continue;
      links[{worker.host, ps_[probe.ps].host}].probed.push_back(probe.bytes_per_sec);
    }
  }
  auto link_list = status.initLinks(links.size());
  size_t l = 0;
  for (const auto& [pair, link] : links) {
    link_list[l].setFrom(pair.first);
    link_list[l].setTo(pair.second);
    link_list[l].setBytesPerSec(link.traffic);
    link_list[l].setProbedBytesPerSec(Median(link.probed));
    l++;
  }

  // What the steps wait for, longest first.
  std::vector<std::pair<uint64_t, const Node*>> waits;
  for (const Node& p : ps_) {
    if (p.wait && !p.lost && !p.done) {
      const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.wait->heard);
      waits.push_back({p.wait->waited_ms + static_cast<uint64_t>(since.count()), &p});
    }
  }
  std::sort(waits.begin(), waits.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  auto wait_list = status.initWaits(waits.size());
  for (size_t i = 0; i < waits.size(); ++i) {
    const Node::Wait& w = *waits[i].second->wait;
    const Chunk& chunk = map_->chunks()[w.chunk];
    wait_list[i].setStep(w.step);
    wait_list[i].setPs(waits[i].second->rank);
    auto missing = wait_list[i].initMissing(w.missing.size());
    for (size_t k = 0; k < w.missing.size(); ++k) missing.set(k, w.missing[k]);
    wait_list[i].setTensor(map_->tensors()[chunk.tensor].name);
    wait_list[i].setBegin(chunk.offset);
    wait_list[i].setEnd(chunk.offset + chunk.numel);
    wait_list[i].setWaitedMs(waits[i].first);
  }
}

void Coordinator::MaybePublishMetrics() {
  if (!metrics_server_ || Clock::now() < next_metrics_page_) return;
  next_metrics_page_ = Clock::now() + std::chrono::seconds(1);
  capnp::MallocMessageBuilder message;
  auto status = message.initRoot<wire::JobStatus>();
  BuildStatus(status);
  metrics_server_->Publish(PrometheusText(status.asReader()));
}

void Coordinator::NoteProbes(Node& worker, capnp::List<wire::ProbeResult>::Reader probes) {
  if (probes.size() > ps_.size()) return;  // one per PS at most
  std::vector<Node::Probe> noted;
  for (auto p : probes) {
    // At most 1 GiB in at least a microsecond: anything else is a lie.
    if (p.getPs() < 0 || p.getPs() >= static_cast<int>(ps_.size()) || p.getMicros() == 0 ||
        p.getBytes() > (uint64_t{1} << 30)) {
      return;
    }
    noted.push_back({p.getRound(), p.getPs(),
                     static_cast<double>(p.getBytes()) * 1e6 / static_cast<double>(p.getMicros())});
  }
  worker.probes = std::move(noted);
}

Status Coordinator::HandleProbeRequest(const transport::PeerId& peer) {
  if (state_ != wire::JobState::RUNNING) {
    return FailedPrecondition("the job is not running: no link to probe");
  }
  if (!probe_since_) {  // a new round; a request during one joins it
    probe_round_++;
    probe_since_ = Clock::now();
  }
  probe_asks_.push_back(peer);
  return Status::Ok();
}

void Coordinator::MaybeAnswerProbes() {
  if (!probe_since_) return;
  bool measured = true;
  const std::vector<int> serving = ServingPs();
  for (const Node& w : workers_) {
    if (!w.active()) continue;
    for (int ps : serving) {
      bool found = false;
      for (const Node::Probe& p : w.probes)
        found = found || (p.round == probe_round_ && p.ps == ps);
      measured = measured && found;
    }
  }
  if (!measured && Clock::now() - *probe_since_ < kProbeWait) return;
  for (const transport::PeerId& peer : probe_asks_) {
    wire::Outgoing b;
    BuildStatus(b.header().initStatusReply());
    Ignored(listener_->Send(peer, b.Take()), "answering eenctl status --probe");
  }
  probe_asks_.clear();
  probe_since_.reset();
}

Status Coordinator::HandleStatusRequest(const transport::PeerId& peer) {
  wire::Outgoing b;
  BuildStatus(b.header().initStatusReply());
  return listener_->Send(peer, b.Take());
}

}  // namespace een
