// een::Error: what the public worker API throws (as LibTorch throws
// c10::Error). what() says what happened, where, and what to do; code()
// says what kind of failure it is, to branch on (the codes of the roles'
// own errors travel with them: a full disk on a PS stays kResourceExhausted).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace een {

class Error : public std::runtime_error {
 public:
  enum class Code {
    kInvalidArgument,  // this program used the API wrongly, or sent what a role refuses
    kNotFound,
    kDeadlineExceeded,    // a role did not answer in time
    kUnavailable,         // a role cannot be reached
    kFailedPrecondition,  // the job's state does not allow it
    kAborted,             // the job was ended (the message says why and by whom)
    kResourceExhausted,   // memory, disk or a queue's byte cap
    kPermissionDenied,    // not this job's secret
    kDataLoss,
    kInternal,
    kStaleEpoch,   // routed with an old shard map (handled inside; seen only if it persists)
    kJobFinished,  // nothing is left to do: the job, or this worker's part, finished
    kRolledBack,   // een::RolledBack
  };
  explicit Error(const std::string& what, Code code = Code::kInvalidArgument)
      : std::runtime_error(what), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// Thrown by DataParallel::Step() when a lost PS made the job roll back to
// its last complete snapshot: the model holds that step's parameters again
// and step() == step(); continue the training loop from there.
class RolledBack : public Error {
 public:
  explicit RolledBack(uint64_t step)
      : Error("een: a parameter server was lost; the job rolled back to step " +
                  std::to_string(step) +
                  ": carry on from there (dp.step() says it; the batches from that step come "
                  "again), or let a JobSampler (Python een.DistributedSampler in a job) do it",
              Code::kRolledBack),
        step_(step) {}
  uint64_t step() const { return step_; }

 private:
  uint64_t step_;
};

}  // namespace een
