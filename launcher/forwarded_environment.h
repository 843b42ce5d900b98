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

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace een {

using EnvironmentEntries = std::vector<std::pair<std::string, std::string>>;

// Whether NAME travels to the other hosts.
bool IsForwarded(const std::string& name);

// The wire text of `environment` (NAME=VALUE strings, as in `environ`),
// those IsForwarded keeps, and those named in `also` (een-launch --env:
// the user asked for them; never the job secret's).
std::string EncodeForwardedEnvironment(const char* const* environment,
                                       const std::set<std::string>& also = {});

// One --env argument, NAME or NAME=VALUE: its name and, when given, its
// value; an error naming what is wrong (a bad name, an EEN_* variable,
// which are een-launch's, or a NAME not set here).
Result<std::pair<std::string, std::optional<std::string>>> ParseEnvFlag(const std::string& text);

// Reads the list from `fd` (up to its empty entry; nothing after it).
Result<EnvironmentEntries> ReadForwardedEnvironment(int fd);

// setenv()s each entry.
void ApplyForwardedEnvironment(const EnvironmentEntries& entries);

}  // namespace een
