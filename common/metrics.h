// Metrics: one role's named counters and gauges, the one home for what a
// process measures about itself (pushes and their bytes, pulls, ...). A role
// owns a Metrics, registers each metric once by name and updates it from
// any thread without a lock; its heartbeat carries a snapshot of all of
// them to the coordinator (ToWire), which keeps the newest per process and
// answers `eenctl metrics` with them.
// Names are [a-z0-9_.], at most kMaxNameBytes, and a role registers at most
// kMaxMetrics; FromWire() refuses anything else from a peer (more than
// kMaxWireMetrics, or a bad name or value).
// Thread safety: counter()/gauge() and ToWire() lock; Counter::Add and
// Gauge::Set are atomic and may be called from any thread. References
// returned stay valid as long as the Metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "schema/een.capnp.h"

namespace een {

// A count that only grows.
class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that is set (the last step's sync time, say).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// One metric as read: from this process or from a peer's heartbeat.
struct MetricSample {
  std::string name;
  double value = 0;
  bool counter = true;  // else a gauge
};

class Metrics {
 public:
  static constexpr size_t kMaxMetrics = 64;
  // A heartbeat also carries the process's own (HeartbeatSender).
  static constexpr size_t kMaxWireMetrics = kMaxMetrics + 2;
  static constexpr size_t kMaxNameBytes = 64;

  // The metric called `name`, registered on first use. Registering more than
  // kMaxMetrics, a bad name, or a name as the other kind is a programming
  // error: it throws std::logic_error.
  Counter& counter(const std::string& name);
  Gauge& gauge(const std::string& name);

  std::vector<MetricSample> Snapshot() const;
  // Writes every metric into a heartbeat (its `metrics` list).
  void ToWire(wire::Heartbeat::Builder heartbeat) const;
  // A peer's metrics, checked: InvalidArgument for too many, or a bad name.
  static Result<std::vector<MetricSample>> FromWire(capnp::List<wire::Metric>::Reader list);
  static void ToWire(const std::vector<MetricSample>& samples,
                     capnp::List<wire::Metric>::Builder list);

 private:
  struct Entry {
    std::string name;
    Counter counter;
    Gauge gauge;
    bool is_counter = true;
  };
  Entry& Register(const std::string& name, bool is_counter);

  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // a deque: references stay valid as it grows
};

// True for a valid metric name: 1..kMaxNameBytes of [a-z0-9_.].
bool IsMetricName(const std::string& name);

}  // namespace een
