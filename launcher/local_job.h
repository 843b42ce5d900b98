// The `local` launch backend: a whole job on this machine. It removes the
// leftovers of this user's dead jobs, makes the job's run folder, and runs a
// JobSupervisor whose every role starts on one LocalHost.
#pragma once

#include <string>
#include <vector>

#include "common/job_config.h"

namespace een {

// The exit code for een-launch (JobSupervisor::Run's).
int RunLocalJob(const JobConfig& config, const std::vector<std::string>& command,
                const std::string& bin_dir);

}  // namespace een
