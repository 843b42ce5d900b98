// The `local` launch backend: a whole job on this machine. It removes the
// leftovers of this user's dead jobs, makes the job's run folder, and runs a
// JobSupervisor whose every role starts on one LocalHost; again, whole, when
// a worker failed that no replacement can stand in for (--ps 0, the een
// backend) and --max-restarts allows, as torchrun restarts every worker.
#pragma once

#include <string>
#include <vector>

#include "common/job_config.h"

namespace een {

// The exit code for een-launch (JobSupervisor::Run's).
int RunLocalJob(const JobConfig& config, const std::vector<std::string>& command,
                const std::string& bin_dir);

}  // namespace een
