// een::Error: what the public worker API throws (as LibTorch throws
// c10::Error). what() says what happened, where, and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace een {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace een
