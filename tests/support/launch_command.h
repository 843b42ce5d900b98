// The command line of een-launch (this build's) running `command` with
// `flags`: {een-launch, flags..., "--", command...}. For tests' jobs.
#pragma once

#include <string>
#include <vector>

namespace een::testing {

inline std::vector<std::string> LaunchCommand(const std::vector<std::string>& flags,
                                              const std::vector<std::string>& command) {
  std::vector<std::string> argv = {std::string(EEN_BIN_DIR) + "/een-launch"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace een::testing
