// Small helpers shared by the coordinator's source files (not an interface).
#pragma once

#include <chrono>

#include "schema/een.capnp.h"

namespace een {

inline const char* RoleName(wire::Role r) {
  switch (r) {
    case wire::Role::PS:
      return "ps";
    case wire::Role::WORKER:
      return "worker";
    default:
      return "coordinator";
  }
}

inline long MillisSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

}  // namespace een
