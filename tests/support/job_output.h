// Reading an een-launch job's merged output in tests.
#pragma once

#include <sys/types.h>

#include <regex>
#include <string>

namespace een::testing {

// The newest pid the output gives for `role` ("ps 1", "worker 2", "coordinator"):
// from registration, a PS replacement taking over or joining, or the
// coordinator listening.
inline pid_t NewestPid(const std::string& output, const std::string& role) {
  const std::regex re =
      role == "coordinator"
          ? std::regex("listening on \\S+ \\(pid ([0-9]+)\\)")
          : std::regex("registered " + role + " \\(host [^,]+, pid ([0-9]+)\\)|" + role +
                       " \\(host [^,]+, pid ([0-9]+)\\) (?:takes over|joins the running job)");
  pid_t pid = -1;
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it) {
    pid = std::stoi((*it)[1].matched ? (*it)[1].str() : (*it)[2].str());
  }
  return pid;
}

}  // namespace een::testing
