#include "launcher/slurm_step.h"

#include <cstdio>
#include <cstdlib>

namespace een {
namespace {

const char* Get(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

Result<long> Number(const char* name, long min) {
  const char* v = Get(name);
  if (!v) return FailedPrecondition(std::string(name) + " is not set by Slurm");
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < min) {
    return InvalidArgument(std::string(name) + "='" + v +
                           "' is not a number >= " + std::to_string(min));
  }
  return n;
}

// The first host of a Slurm host list ("node[01-04],gpu7" -> node01).
Result<std::string> FirstHost(const std::string& list) {
  for (char c : list) {
    if (c == '\'' || c == '\\') return InvalidArgument("odd Slurm node list '" + list + "'");
  }
  const std::string command = "scontrol show hostnames '" + list + "' 2>&1";
  FILE* p = popen(command.c_str(), "r");
  if (!p) return Unavailable("cannot run scontrol to expand the node list " + list);
  char line[1024] = {0};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  const int rc = pclose(p);
  std::string host = got ? line : "";
  while (!host.empty() && (host.back() == '\n' || host.back() == ' ')) host.pop_back();
  if (rc != 0 || host.empty() || host.find(' ') != std::string::npos) {
    return Unavailable("`scontrol show hostnames " + list + "` failed" +
                       (host.empty() ? std::string() : ": " + host) +
                       "; give node 0's address with --rdzv HOST:PORT");
  }
  return host;
}

}  // namespace

Result<std::optional<SlurmStep>> SlurmStepOfThisProcess(bool find_first_host) {
  if (!Get("SLURM_PROCID")) return std::optional<SlurmStep>();
  SlurmStep step;
  EEN_ASSIGN_OR_RETURN(long nnodes, Number("SLURM_NNODES", 1));
  EEN_ASSIGN_OR_RETURN(long node, Number("SLURM_NODEID", 0));
  if (const char* tasks = Get("SLURM_NTASKS"); tasks && std::atol(tasks) != nnodes) {
    return FailedPrecondition(
        std::string("this srun step runs ") + tasks + " tasks on " + std::to_string(nnodes) +
        " nodes; een-launch runs once per node and starts that node's roles itself: use "
        "`srun --ntasks-per-node=1 een-launch ...`");
  }
  if (nnodes > 65536 || node >= nnodes) {
    return InvalidArgument("SLURM_NODEID " + std::to_string(node) + " is not below SLURM_NNODES " +
                           std::to_string(nnodes));
  }
  if (find_first_host) {
    const char* list = Get("SLURM_STEP_NODELIST");
    if (!list) list = Get("SLURM_JOB_NODELIST");
    if (!list) {
      return FailedPrecondition("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
    }
    EEN_ASSIGN_OR_RETURN(step.first_host, FirstHost(list));
  }
  step.nnodes = static_cast<int>(nnodes);
  step.node_rank = static_cast<int>(node);
  if (Get("SLURM_JOB_ID")) {
    EEN_ASSIGN_OR_RETURN(long job, Number("SLURM_JOB_ID", 0));
    step.rdzv_port = 29500 + static_cast<int>(job % 2000);
  }
  return std::optional<SlurmStep>(step);
}

}  // namespace een
