// een::Error: what the public worker API throws (as LibTorch throws
// c10::Error). what() says what happened, where, and what to do.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace een {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown by DataParallel::Step() when a lost PS made the job roll back to
// its last complete snapshot: the model holds that step's parameters again
// and step() == step(); continue the training loop from there.
class RolledBack : public Error {
 public:
  explicit RolledBack(uint64_t step)
      : Error("een: a parameter server was lost; the job rolled back to step " +
              std::to_string(step)),
        step_(step) {}
  uint64_t step() const { return step_; }

 private:
  uint64_t step_;
};

}  // namespace een
