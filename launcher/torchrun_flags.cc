#include "launcher/torchrun_flags.h"

#include <unistd.h>

#include <algorithm>
#include <map>

namespace een {
namespace {

// torchrun's flags that mean what one of een-launch's does.
const std::map<std::string, std::string>& Renamed() {
  static const std::map<std::string, std::string> kRenamed = {
      {"--nproc_per_node", "--nproc-per-node"},
      {"--node_rank", "--node-rank"},
      {"--rdzv_endpoint", "--rdzv"},
      {"--rdzv-endpoint", "--rdzv"},
      {"--master_addr", "--master-addr"},
      {"--master_port", "--master-port"},
      {"--max_restarts", "--max-restarts"},
  };
  return kRenamed;
}

// torchrun's flags with no een-launch equivalent, and what to do instead.
const std::map<std::string, std::string>& Refused() {
  static const std::map<std::string, std::string> kRefused = {
      {"--standalone",
       "een-launch runs a job on this machine by default (its coordinator picks free ports): "
       "drop --standalone"},
      {"--rdzv-backend",
       "een-launch's nodes meet at node 0's coordinator: give every node --rdzv HOST:PORT "
       "(node 0's address and a free port) and drop --rdzv-backend"},
      {"--rdzv-id",
       "een-launch names the job by its rendezvous address (TORCHELASTIC_RUN_ID): drop --rdzv-id"},
      {"--rdzv-conf",
       "een-launch has no rendezvous settings; its timeouts are --startup-timeout and "
       "--rdzv-last-call"},
      {"--monitor-interval",
       "een-launch watches its processes all the time; a silent one is lost after "
       "--failover-threshold (default 500ms)"},
      {"--start-method",
       "een-launch starts every worker as a process of its own from the command after --"},
      {"--role", "een-launch's workers all have the role 'default' (ROLE_NAME)"},
      {"--module",
       "een-launch runs the command after -- as written: `een-launch ... -- python3 -m MODULE`"},
      {"-m",
       "een-launch runs the command after -- as written: `een-launch ... -- python3 -m MODULE`"},
      {"--no-python",
       "een-launch runs the command after -- as written (it adds no python3): drop --no-python"},
      {"--run-path",
       "een-launch runs the command after -- as written: `een-launch ... -- python3 FILE.py`"},
      {"--log-dir",
       "een-launch prints every process's lines on its own output, each with its label "
       "([worker 3]): redirect that (een-launch ... > job.log)"},
      {"--redirects",
       "een-launch prints every process's lines on its own output, each with its label "
       "([worker 3]): redirect that (een-launch ... > job.log)"},
      {"--tee",
       "een-launch prints every process's lines on its own output, each with its label "
       "([worker 3]): use `een-launch ... | tee job.log`"},
      {"--local-addr", "the address this node's roles listen on is --host ADDRESS"},
      {"--max-restarts-per-node", "een-launch's --max-restarts counts the job's replacements"},
  };
  return kRefused;
}

// torchrun spells most of its flags both ways: --rdzv_backend, --rdzv-backend.
std::string Dashed(std::string flag) {
  if (flag.rfind("--", 0) == 0) std::replace(flag.begin() + 2, flag.end(), '_', '-');
  return flag;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

Status TranslateTorchrunFlags(std::vector<std::string>* args) {
  for (std::string& arg : *args) {
    if (arg.rfind("-", 0) != 0) continue;  // a value
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq);
    if (auto it = Renamed().find(name); it != Renamed().end()) {
      arg = it->second + value;
      continue;
    }
    if (auto it = Refused().find(Dashed(name)); it != Refused().end()) {
      return InvalidArgument("torchrun's " + name + " has no een-launch equivalent: " + it->second);
    }
  }
  return Status::Ok();
}

std::string NearestFlag(const std::string& flag, const std::vector<std::string>& known) {
  const std::string dashed = Dashed(flag);
  std::string best;
  size_t best_distance = 3;  // at most 2 edits
  for (const std::string& k : known) {
    if (k == dashed) return k;
    size_t d = EditDistance(dashed, k);
    // "--work" for "--workers": a prefix of a flag is near it too.
    if (dashed.size() >= 5 && k.rfind(dashed, 0) == 0) d = std::min<size_t>(d, 2);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  return best;
}

std::string ExplainUnparsed(const std::vector<std::string>& unparsed,
                            const std::vector<std::string>& known) {
  if (unparsed.empty()) return "";
  const std::string& first = unparsed.front();
  if (first.rfind("-", 0) == 0 && first.size() > 1) {
    const std::string name = first.substr(0, first.find('='));
    const std::string near = NearestFlag(name, known);
    if (!near.empty()) return "unknown flag " + name + ": did you mean " + near + "?";
    return "unknown flag " + name +
           " (een-launch --help lists the flags; the program's own flags go after --)";
  }
  // A word that is no flag's value: the program, without `--` before it.
  std::string rest;
  for (const std::string& word : unparsed) rest += " " + word;
  const std::string program =
      first.size() > 3 && first.compare(first.size() - 3, 3, ".py") == 0 ? "python3 " : "";
  return "'" + first +
         "' is not an een-launch flag: put the program after --, e.g. `een-launch --ps 2 "
         "--workers 4 --" +
         (program.empty() ? rest : " " + program + rest.substr(1)) + "`";
}

std::string ProgramProblem(const std::string& program) {
  const bool python_file = program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0;
  if (!python_file || access(program.c_str(), X_OK) == 0) return "";
  return program + " is a Python file, not a program: run it as `een-launch ... -- python3 " +
         program + " ...`";
}

}  // namespace een
