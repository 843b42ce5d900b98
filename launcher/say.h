// Say: one line from een-launch itself, "[een-launch] ...", flushed at once
// (its lines interleave with the roles' forwarded output on stdout).
#pragma once

#include <cstdio>
#include <string>

namespace een {

inline void Say(const std::string& line) {
  std::fprintf(stdout, "[een-launch] %s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace een
