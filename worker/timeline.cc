#include "worker/timeline.h"

#include <fmt/format.h>

#include <fstream>

#include "common/logging.h"

namespace een {

Timeline::Timeline(std::string path, int rank, uint64_t max_steps)
    : path_(std::move(path)), rank_(rank), max_steps_(max_steps) {}

double Timeline::Micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void Timeline::BackwardBegins(Clock::time_point at) {
  if (in_backward_) return;
  in_backward_ = true;
  backward_begin_ = at;
}

void Timeline::BucketPushed(uint32_t bucket, size_t bytes, bool during_backward) {
  ++pushes_;
  pushes_during_backward_ += during_backward;
  if (recording()) {
    events_.push_back({fmt::format("push bucket {} ({:.1f} MB){}", bucket, bytes / 1e6,
                                   during_backward ? "" : ", in Step()"),
                       Micros(Clock::now()), -1});
  }
}

void Timeline::StepBegins(uint64_t step) {
  step_ = step;
  step_begin_ = Clock::now();
  if (!in_backward_) backward_begin_ = step_begin_;  // no gradient came: an empty backward
  in_backward_ = false;
  backward_us_ += Micros(step_begin_) - Micros(backward_begin_);
  if (recording()) {
    events_.push_back({fmt::format("backward, step {}", step), Micros(backward_begin_),
                       Micros(step_begin_) - Micros(backward_begin_)});
  }
}

void Timeline::StepEnds() {
  const auto now = Clock::now();
  sync_us_ += Micros(now) - Micros(step_begin_);
  if (recording()) {
    events_.push_back({fmt::format("sync, step {}", step_), Micros(step_begin_),
                       Micros(now) - Micros(step_begin_)});
  }
  ++steps_;
}

std::string Timeline::Summary() const {
  const double n = std::max<uint64_t>(steps_, 1);
  return fmt::format(
      "{} of {} bucket pushes started during backward; mean backward {:.2f} ms, "
      "mean sync {:.2f} ms over {} steps",
      pushes_during_backward_, pushes_, backward_us_ / n / 1000, sync_us_ / n / 1000, steps_);
}

Timeline::~Timeline() {
  std::ofstream out(path_);
  out << "{\"traceEvents\":[\n";
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    out << fmt::format("{{\"name\":\"{}\",\"ph\":\"{}\",\"ts\":{:.1f},", e.name,
                       e.duration_us < 0 ? "i" : "X", e.begin_us);
    if (e.duration_us >= 0)
      out << fmt::format("\"dur\":{:.1f},", e.duration_us);
    else
      out << "\"s\":\"t\",";
    out << fmt::format("\"pid\":{},\"tid\":{}}}{}\n", rank_, e.name.rfind("push", 0) == 0 ? 2 : 1,
                       i + 1 < events_.size() ? "," : "");
  }
  out << "]}\n";
  out.flush();
  if (!out)
    spdlog::warn("could not write the timeline to {}", path_);
  else
    spdlog::info("timeline of the first {} steps in {}; {}", std::min(steps_, max_steps_), path_,
                 Summary());
}

}  // namespace een
