// How eenctl finds the job it operates on this machine.
//   coordinator: --coordinator, else EEN_COORDINATOR (set in every role's
//     environment), else the run folder of the one job whose een-launch
//     runs on this machine as this user (/tmp/een-job-*/{launcher,coordinator}).
//   secret: --secret-file, else EEN_JOB_SECRET_FILE, else the run folder of
//     the job on this machine that names that coordinator; an empty path
//     means a job started with --insecure.
// Each fails with a message saying what to pass instead.
#pragma once

#include <string>

#include "common/status.h"

namespace een {

Result<std::string> FindCoordinator(const std::string& given);
Result<std::string> FindSecretFile(const std::string& coordinator, const std::string& given);

}  // namespace een
