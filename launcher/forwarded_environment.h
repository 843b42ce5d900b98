// The environment the ssh backend forwards from the launching host to every
// host's een-launch, as horovodrun does: a job started over ssh runs with
// the variables the user set where they typed the command (OPENBLAS_*,
// OMP_*, NCCL_*, PYTHONPATH, a virtualenv's PATH, ...), not with the bare
// environment a non-interactive ssh session gives. Without it, workers on
// other hosts can pick other BLAS kernels and train differently.
//
// What is not forwarded: the session's own variables (HOME, USER, SHELL,
// PWD, TERM, DISPLAY, SSH_*, XDG_*, ...), bash's exported functions, and
// the job secret's (it travels on its own). A role's EEN_* variables are
// set by each host's een-launch over whatever came.
//
// On the wire (ssh's stdin, after the secret's line; never a command line,
// so no value shows in `ps` on any host): NAME=VALUE entries, each ended by
// a NUL byte, the list ended by an empty entry. Reading checks every entry
// (a name of letters, digits and '_', not starting with a digit), and caps
// an entry at 128 KiB and the whole at 1 MiB.
// Thread safety: pure functions, apart from ApplyForwardedEnvironment
// (setenv: call before starting threads).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace een {

using EnvironmentEntries = std::vector<std::pair<std::string, std::string>>;

// Whether NAME travels to the other hosts.
bool IsForwarded(const std::string& name);

// The wire text of `environment` (NAME=VALUE strings, as in `environ`),
// those IsForwarded keeps.
std::string EncodeForwardedEnvironment(const char* const* environment);

// Reads the list from `fd` (up to its empty entry; nothing after it).
Result<EnvironmentEntries> ReadForwardedEnvironment(int fd);

// setenv()s each entry.
void ApplyForwardedEnvironment(const EnvironmentEntries& entries);

}  // namespace een
