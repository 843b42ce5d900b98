#include "common/metrics.h"

#include <cmath>
#include <stdexcept>

namespace een {

bool IsMetricName(const std::string& name) {
  if (name.empty() || name.size() > Metrics::kMaxNameBytes) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) return false;
  }
  return true;
}

Metrics::Entry& Metrics::Register(const std::string& name, bool is_counter) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (e.name != name) continue;
    if (e.is_counter != is_counter) throw std::logic_error("metric " + name + " has another kind");
    return e;
  }
  if (!IsMetricName(name)) throw std::logic_error("bad metric name '" + name + "'");
  if (entries_.size() >= kMaxMetrics) throw std::logic_error("too many metrics: " + name);
  Entry& e = entries_.emplace_back();
  e.name = name;
  e.is_counter = is_counter;
  return e;
}

Counter& Metrics::counter(const std::string& name) { return Register(name, true).counter; }
Gauge& Metrics::gauge(const std::string& name) { return Register(name, false).gauge; }

std::vector<MetricSample> Metrics::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MetricSample> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) {
    out.push_back({e.name, e.is_counter ? static_cast<double>(e.counter.value()) : e.gauge.value(),
                   e.is_counter});
  }
  return out;
}

void Metrics::ToWire(wire::Heartbeat::Builder heartbeat) const {
  const std::vector<MetricSample> samples = Snapshot();
  ToWire(samples, heartbeat.initMetrics(samples.size()));
}

void Metrics::ToWire(const std::vector<MetricSample>& samples,
                     capnp::List<wire::Metric>::Builder list) {
  for (size_t i = 0; i < samples.size() && i < list.size(); ++i) {
    list[i].setName(samples[i].name);
    list[i].setValue(samples[i].value);
    list[i].setCounter(samples[i].counter);
  }
}

Result<std::vector<MetricSample>> Metrics::FromWire(capnp::List<wire::Metric>::Reader list) {
  if (list.size() > kMaxWireMetrics) {
    return InvalidArgument("a heartbeat carries " + std::to_string(list.size()) +
                           " metrics, more than " + std::to_string(kMaxWireMetrics));
  }
  std::vector<MetricSample> out;
  out.reserve(list.size());
  for (auto m : list) {
    std::string name(m.getName().cStr(), m.getName().size());
    if (!IsMetricName(name)) return InvalidArgument("a heartbeat carries a bad metric name");
    const double value = m.getValue();
    if (!std::isfinite(value) || (m.getCounter() && (value < 0 || value >= 0x1p64))) {
      return InvalidArgument("a heartbeat carries metric " + name + " with value " +
                             std::to_string(value));
    }
    out.push_back({std::move(name), value, m.getCounter()});
  }
  return out;
}

}  // namespace een
