// Say: one line from een-launch itself, "[een-launch] ...", flushed at once
// (its lines interleave with the roles' forwarded output on stdout).
#pragma once

#include <cstdio>
#include <string>

namespace een {

// "[een-launch]"; a per-node launch names its node: "[een-launch node 2]".
inline std::string& SayPrefix() {
  static std::string prefix = "[een-launch]";
  return prefix;
}

inline void Say(const std::string& line) {
  std::fprintf(stdout, "%s %s\n", SayPrefix().c_str(), line.c_str());
  std::fflush(stdout);
}

}  // namespace een
