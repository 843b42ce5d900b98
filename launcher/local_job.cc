#include "launcher/local_job.h"

#include "launcher/job_supervisor.h"
#include "launcher/leftovers.h"
#include "launcher/local_host.h"

namespace een {

int RunLocalJob(const JobConfig& config, const std::vector<std::string>& command,
                const std::string& bin_dir) {
  // A job whose failed worker no replacement can stand in for starts
  // again whole (JobSupervisor::wants_restart), as torchrun does.
  for (int restart = 0;; ++restart) {
    const std::string run_dir = NewRunFolder();
    LocalHost host;
    JobSupervisor supervisor(
        JobPlan(config, command, bin_dir, run_dir), &host,
        [&host](const std::string&, int) { return &host; }, std::nullopt, restart);
    const int code = supervisor.Run();  // an empty run_dir: the supervisor says why and fails
    if (!supervisor.wants_restart()) return code;
  }
}

}  // namespace een
