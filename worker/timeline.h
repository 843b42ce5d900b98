// Timeline: what one worker did when, as a Chrome trace-event file
// (open it in chrome://tracing or https://ui.perfetto.dev).
//
// DataParallel records, with EEN_TIMELINE=PREFIX, each step's backward
// (first gradient to Step()), every bucket push (when it left) and the sync
// (Step() until the parameters are fresh) to PREFIX.worker-RANK.json, for
// the first `max_steps` steps; and for every step it counts how many bucket
// pushes started during backward, the overlap Summary() reports.
// Thread safety: callers serialise (DataParallel holds its lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace een {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline(std::string path, int rank, uint64_t max_steps);
  ~Timeline();  // writes the file

  void BackwardBegins(Clock::time_point at);  // the step's first gradient
  void BucketPushed(uint32_t bucket, size_t bytes, bool during_backward);
  void StepBegins(uint64_t step);
  void StepEnds();
  // "N of M bucket pushes started during backward; mean backward X ms, sync Y ms"
  std::string Summary() const;

 private:
  struct Event {
    std::string name;
    double begin_us, duration_us;  // duration < 0: an instant
  };
  double Micros(Clock::time_point t) const;
  bool recording() const { return steps_ < max_steps_; }

  std::string path_;
  int rank_;
  uint64_t max_steps_, steps_ = 0;
  Clock::time_point origin_ = Clock::now(), backward_begin_, step_begin_;
  bool in_backward_ = false;
  uint64_t step_ = 0;
  std::vector<Event> events_;
  uint64_t pushes_during_backward_ = 0, pushes_ = 0;
  double backward_us_ = 0, sync_us_ = 0;
};

}  // namespace een
