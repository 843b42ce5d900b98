#include "launcher/process_rates.h"

#include <algorithm>
#include <string>

namespace een {
namespace {

double ValueOf(const std::vector<MetricSample>& metrics, const std::string& name) {
  for (const MetricSample& m : metrics) {
    if (m.name == name) return m.value;
  }
  return 0;
}

}  // namespace

void ProcessRates::Note(Clock::time_point at, wire::Role role,
                        const std::vector<MetricSample>& metrics,
                        capnp::List<wire::PeerTraffic>::Reader traffic, int num_ps,
                        uint64_t samples) {
  const bool ps = role == wire::Role::PS;
  Sample now{.at = at,
             .cpu_micros = ValueOf(metrics, "process.cpu_micros"),
             .in = ValueOf(metrics, ps ? "ps.push_bytes" : "worker.pull_bytes"),
             .out = ValueOf(metrics, ps ? "ps.pull_bytes" : "worker.push_bytes"),
             .samples = static_cast<double>(samples)};
  for (uint32_t i = 0; i < traffic.size() && i < static_cast<uint32_t>(std::max(num_ps, 0)); ++i) {
    const auto t = traffic[i];
    if (t.getPs() < 0 || t.getPs() >= num_ps) continue;
    now.per_ps[t.getPs()] = {static_cast<double>(t.getBytesIn()),
                             static_cast<double>(t.getBytesOut())};
  }
  if (!base_ || now.cpu_micros < base_->cpu_micros || now.in < base_->in || now.out < base_->out ||
      now.samples < base_->samples || at < base_->at) {
    base_ = std::move(now);
    return;
  }
  const double seconds = std::chrono::duration<double>(at - base_->at).count();
  if (seconds * 1000 < static_cast<double>(window_.count())) return;
  cpu_percent_ = (now.cpu_micros - base_->cpu_micros) / 1e6 / seconds * 100;
  bytes_ = {(now.in - base_->in) / seconds, (now.out - base_->out) / seconds};
  samples_per_second_ = (now.samples - base_->samples) / seconds;
  per_ps_.clear();
  for (const auto& [rank, bytes] : now.per_ps) {
    const auto before = base_->per_ps.find(rank);
    const std::pair<double, double> from =
        before == base_->per_ps.end() ? std::pair<double, double>{0, 0} : before->second;
    if (bytes.first < from.first || bytes.second < from.second) continue;
    per_ps_[rank] = {(bytes.first - from.first) / seconds, (bytes.second - from.second) / seconds};
  }
  base_ = std::move(now);
}

}  // namespace een
