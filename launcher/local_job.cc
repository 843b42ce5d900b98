#include "launcher/local_job.h"

#include <cstdlib>

#include "launcher/job_supervisor.h"
#include "launcher/leftovers.h"
#include "launcher/local_host.h"

namespace een {

int RunLocalJob(const JobConfig& config, const std::vector<std::string>& command,
                const std::string& bin_dir) {
  RemoveLeftoversOfDeadJobs();  // of this user's jobs killed before they could clean up
  std::string run_dir;
  char tmpl[] = "/tmp/een-job-XXXXXX";
  if (mkdtemp(tmpl)) run_dir = tmpl;
  if (!run_dir.empty()) MarkRunFolder(run_dir);
  LocalHost host;
  JobSupervisor supervisor(JobPlan(config, command, bin_dir, run_dir), &host,
                           [&host](const std::string&, int) { return &host; });
  return supervisor.Run();  // an empty run_dir: the supervisor says why and fails
}

}  // namespace een
