#include "common/heartbeat_sender.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/logging.h"
#include "common/resource_usage.h"
#include "common/transport/registry.h"
#include "common/wire.h"

namespace een {

using Clock = std::chrono::steady_clock;

namespace {

// Threads started while one lives inherit a higher priority (nice -10)
// than the calling thread's, where the system allows it; the calling
// thread gets its own back at the end.
class RaisedPriority {
 public:
  RaisedPriority() : tid_(static_cast<id_t>(syscall(SYS_gettid))) {
    errno = 0;
    before_ = getpriority(PRIO_PROCESS, tid_);
    if (errno != 0) return;
    raised_ = setpriority(PRIO_PROCESS, tid_, std::max(before_ - 10, -20)) == 0;
    if (!raised_) spdlog::debug("heartbeats run at the process's priority: {}", strerror(errno));
  }
  ~RaisedPriority() {
    if (raised_) setpriority(PRIO_PROCESS, tid_, before_);  // lowering is always allowed
  }
  RaisedPriority(const RaisedPriority&) = delete;
  RaisedPriority& operator=(const RaisedPriority&) = delete;

 private:
  id_t tid_;
  int before_ = 0;
  bool raised_ = false;
};

}  // namespace

Result<std::unique_ptr<HeartbeatSender>> HeartbeatSender::Start(const std::string& address,
                                                                std::chrono::milliseconds interval,
                                                                std::chrono::milliseconds threshold,
                                                                const Metrics* metrics, Fill fill,
                                                                FlightRecorder* recorder) {
  RaisedPriority raised;  // for the device's I/O thread and the heartbeat thread
  EEN_ASSIGN_OR_RETURN(transport::Device * device,
                       transport::DeviceFor(address, transport::Lane::kHeartbeat));
  EEN_ASSIGN_OR_RETURN(auto connection, device->Connect(address));
  return std::make_unique<HeartbeatSender>(std::move(connection), interval, threshold, metrics,
                                           std::move(fill), recorder);
}

HeartbeatSender::HeartbeatSender(std::unique_ptr<transport::Connection> connection,
                                 std::chrono::milliseconds interval,
                                 std::chrono::milliseconds threshold, const Metrics* metrics,
                                 Fill fill, FlightRecorder* recorder)
    : connection_(std::move(connection)),
      interval_(interval),
      threshold_(threshold),
      metrics_(metrics),
      fill_(std::move(fill)),
      recorder_(recorder) {
  thread_ = std::thread([this] { Loop(); });
}

HeartbeatSender::~HeartbeatSender() {
  stop_ = true;
  thread_.join();
}

std::string HeartbeatSender::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void HeartbeatSender::SetState(State s, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_.load() != State::kRunning) return;  // the first verdict stands
  reason_ = reason;
  state_ = s;
}

void HeartbeatSender::NoteRoundTrip(Clock::time_point sent, Clock::time_point received,
                                    int64_t coordinator_us) {
  const int64_t round_trip =
      std::chrono::duration_cast<std::chrono::microseconds>(received - sent).count();
  if (round_trip < 0) return;  // not an echo of ours
  // The coordinator read its clock about halfway through the round trip.
  const int64_t offset = coordinator_us - FlightRecorder::Micros(sent) - round_trip / 2;
  // The least delayed round trip of the last minute bounds the error best;
  // an older one gives way, so a drifting clock is followed.
  if (round_trip <= best_offset_.round_trip_us ||
      received - best_offset_.at > std::chrono::seconds(60)) {
    best_offset_ = {round_trip, offset, received};
    clock_offset_ = offset;
  }
}

void HeartbeatSender::Loop() {
  auto last_reply = Clock::now();
  const auto coordinator_silence = threshold_ * 4;
  while (!stop_) {
    wire::Outgoing b;
    auto hb = b.header().initHeartbeat();
    if (fill_) fill_(hb);
    std::vector<MetricSample> samples;
    if (metrics_) samples = metrics_->Snapshot();
    const ResourceUsage usage = ResourceUsage::Now();
    samples.push_back({"process.cpu_micros", std::floor(usage.cpu_seconds * 1e6), true});
    samples.push_back(
        {"process.rss_bytes", static_cast<double>(ResourceUsage::CurrentRssBytes()), false});
    Metrics::ToWire(samples, hb.initMetrics(samples.size()));
    hb.setClockOffsetMicros(clock_offset_.load());
    if (recorder_) {
      const std::vector<RecordedEvent> events = recorder_->TakeNew();
      auto list = hb.initEvents(events.size());
      for (size_t i = 0; i < events.size(); ++i) FlightRecorder::ToWire(events[i], list[i]);
      hb.setEventsDropped(recorder_->dropped());
    }
    hb.setSentMicros(FlightRecorder::Micros(Clock::now()));
    if (Status s = connection_->Send(b.Take()); !s.ok()) {
      spdlog::warn("heartbeat to {} failed: {}", connection_->address(), s.ToString());
    }
    const auto next = Clock::now() + interval_;
    while (!stop_ && Clock::now() < next) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
      auto reply = connection_->Receive(std::max(left, std::chrono::milliseconds(1)));
      if (!reply.ok()) continue;
      last_reply = Clock::now();
      Status s = wire::Visit(*reply, [&](wire::Header::Reader h) {
        if (!h.isHeartbeatReply()) return Status::Ok();
        auto r = h.getHeartbeatReply();
        if (r.getEchoMicros() != 0 && r.getCoordinatorMicros() != 0) {
          NoteRoundTrip(Clock::time_point(std::chrono::microseconds(r.getEchoMicros())), last_reply,
                        r.getCoordinatorMicros());
        }
        incarnation_ = r.getIncarnation();
        probe_round_ = r.getProbeRound();
        if (r.getFinalReady()) final_step_ = r.getFinalStep();
        map_epoch_ = r.getMapEpoch();
        if (r.getState() == wire::JobState::SHUTDOWN) SetState(State::kShutdown, "job finished");
        if (r.getState() == wire::JobState::ABORTED) SetState(State::kAborted, r.getReason());
        return Status::Ok();
      });
      if (!s.ok()) spdlog::warn("dropped a bad heartbeat reply: {}", s.ToString());
    }
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_reply);
    if (silent > coordinator_silence) {
      SetState(State::kAborted, "coordinator at " + connection_->address() + " silent for " +
                                    std::to_string(silent.count()) +
                                    " ms (> 4 x failover "
                                    "threshold " +
                                    std::to_string(threshold_.count()) + " ms)");
    }
  }
}

}  // namespace een
