#include "launcher/local_job.h"

#include "launcher/job_supervisor.h"
#include "launcher/leftovers.h"
#include "launcher/local_host.h"

namespace een {

int RunLocalJob(const JobConfig& config, const std::vector<std::string>& command,
                const std::string& bin_dir) {
  const std::string run_dir = NewRunFolder();
  LocalHost host;
  JobSupervisor supervisor(JobPlan(config, command, bin_dir, run_dir), &host,
                           [&host](const std::string&, int) { return &host; });
  return supervisor.Run();  // an empty run_dir: the supervisor says why and fails
}

}  // namespace een
