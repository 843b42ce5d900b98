#include "launcher/ssh_job.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/input_file.h"
#include "common/transport/auth.h"
#include "launcher/forwarded_environment.h"
#include "launcher/local_host.h"
#include "launcher/say.h"
#include "launcher/stop_signal.h"

namespace een {
namespace {

// For a POSIX shell: 'text', with ' written '\''.
std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Result<std::vector<HostfileEntry>> ReadHostfile(const std::string& path) {
  constexpr size_t kMaxBytes = size_t{4} << 20;  // 4,096 hosts of any sane line
  EEN_ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "the hostfile", kMaxBytes));
  std::istringstream in(text);
  std::vector<HostfileEntry> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    HostfileEntry entry;
    if (!(fields >> entry.host)) continue;
    const std::string where = path + " line " + std::to_string(number);
    // A host name or address (user@ allowed, as ssh takes it); nothing
    // ssh would read as an option, nor bytes no host name has.
    const bool name_ok = entry.host.size() <= 253 + 33 && entry.host[0] != '-' &&
                         std::all_of(entry.host.begin(), entry.host.end(), [](unsigned char c) {
                           return std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' ||
                                  c == '@' || c == '[' || c == ']';
                         });
    // (What the line holds is not quoted: the file may not be a hostfile.)
    if (!name_ok) {
      return InvalidArgument(where +
                             ": its first field is not a host name or address (letters, digits, "
                             "'.', '-', '_', ':', an optional user@); a line is `HOST [slots=N]`");
    }
    int column = 1;
    for (std::string field; fields >> field;) {
      ++column;
      char* end = nullptr;
      const long slots =
          field.rfind("slots=", 0) == 0 ? std::strtol(field.c_str() + 6, &end, 10) : -1;
      if (slots < 1 || slots > 4096 || *end != '\0') {
        return InvalidArgument(where + ": field " + std::to_string(column) +
                               " is not slots=N (1 to 4096); a line is `HOST [slots=N]`");
      }
      entry.slots = static_cast<int>(slots);
    }
    for (const HostfileEntry& known : hosts) {
      if (known.host == entry.host) {
        return InvalidArgument(where + ": host " + entry.host +
                               " is listed twice (give it slots=N instead)");
      }
    }
    hosts.push_back(entry);
  }
  if (hosts.empty()) return InvalidArgument("the hostfile " + path + " lists no host");
  if (hosts.size() > 4096) return InvalidArgument("the hostfile " + path + " lists > 4096 hosts");
  return hosts;
}

Result<std::vector<NodeShares>> PlanShares(const std::vector<HostfileEntry>& hosts, int ps,
                                           int workers) {
  const int64_t n = static_cast<int64_t>(hosts.size());
  int64_t slots = 0;
  for (const HostfileEntry& h : hosts) slots += h.slots;
  if (workers > slots) {
    return FailedPrecondition(std::to_string(workers) + " workers need more slots than the " +
                              std::to_string(slots) +
                              " the hostfile gives: add slots=N to its hosts, or add hosts");
  }
  std::vector<NodeShares> shares(hosts.size());
  int next_worker = 0;
  for (int64_t r = 0; r < n; ++r) {
    NodeShares& s = shares[r];
    s.first_ps = static_cast<int>(r * (ps / n) + std::min<int64_t>(r, ps % n));
    s.ps = static_cast<int>(ps / n + (r < ps % n ? 1 : 0));
    s.first_worker = next_worker;
    s.workers = std::min(hosts[r].slots, workers - next_worker);
    next_worker += s.workers;
  }
  return shares;
}

int RunSshJob(const JobConfig& config, const SshJob& job, const std::vector<std::string>& command,
              const std::string& bin_dir) {
  CatchStopSignals();
  const std::string& first = job.hosts[0].host;
  if (job.hosts.size() > 1 &&
      (first == "localhost" || first.rfind("127.", 0) == 0 || first == "::1")) {
    Say("job failed: the hostfile's first host, " + first +
        ", is node 0 (the coordinator), and the other hosts would look for it on themselves: "
        "name it as the others reach it (its host name or address)");
    return 2;
  }
  auto shares = PlanShares(job.hosts, config.ps, config.workers);
  if (!shares.ok()) {
    Say("job failed: " + shares.status().message());
    return 2;
  }
  const std::string secret = config.insecure ? "" : transport::NewSecret();
  std::error_code ec;
  const std::string cwd = std::filesystem::current_path(ec).string();
  const std::string rdzv = job.hosts[0].host + ":" + std::to_string(job.rdzv_port);
  const int n = static_cast<int>(job.hosts.size());
  Say("starting " + std::to_string(config.ps) + " PS and " + std::to_string(config.workers) +
      " workers on " + std::to_string(n) + " hosts over ssh; node 0 (" + job.hosts[0].host +
      ") runs the coordinator, the others meet it at " + rdzv);
  const std::string forwarded = EncodeForwardedEnvironment(environ, job.env_names);
  LocalHost here;
  std::vector<std::shared_ptr<RoleProcess>> nodes;
  for (int r = 0; r < n; ++r) {
    const NodeShares& s = (*shares)[r];
    std::vector<std::string> remote = {bin_dir + "/een-launch"};
    remote.insert(remote.end(), job.job_flags.begin(), job.job_flags.end());
    for (const std::string& flag :
         {std::string("--backend"), std::string("local"), std::string("--nnodes"),
          std::to_string(n), std::string("--node-rank"), std::to_string(r), std::string("--rdzv"),
          rdzv, std::string("--ps"), std::to_string(config.ps), std::string("--workers"),
          std::to_string(config.workers), std::string("--node-ps"),
          std::to_string(s.first_ps) + ":" + std::to_string(s.ps), std::string("--node-workers"),
          std::to_string(s.first_worker) + ":" + std::to_string(s.workers)}) {
      remote.push_back(flag);
    }
    remote.push_back(config.insecure ? "--insecure" : "--stdin-secret");
    remote.push_back("--stdin-env");
    remote.push_back("--");
    remote.insert(remote.end(), command.begin(), command.end());
    std::string line = "cd " + Quote(cwd) + " && exec";
    for (const std::string& a : remote) line += " " + Quote(a);
    ProcessSpec spec;
    spec.label = job.hosts[r].host;
    spec.argv = {"ssh", "-o", "BatchMode=yes", "-T"};
    spec.argv.insert(spec.argv.end(), job.ssh_args.begin(), job.ssh_args.end());
    // After the user's: ssh takes an option's first value, so theirs win.
    spec.argv.insert(spec.argv.end(), {"-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                                       "-o", "ServerAliveCountMax=3"});
    spec.argv.push_back(job.hosts[r].host);
    spec.argv.push_back(line);
    spec.input_pipe = true;
    spec.input = (config.insecure ? "" : secret + "\n") + forwarded;
    spec.nested_labels = true;
    spec.watch_for = "met the coordinator at ";  // it joined the job
    auto started = here.Start(std::move(spec));
    if (!started.ok()) {
      Say("job failed: starting ssh to " + job.hosts[r].host + ": " + started.status().message());
      here.StopAll(std::chrono::milliseconds(3000));
      return 1;
    }
    nodes.push_back(*started);
  }
  // Every node's een-launch ends the job on every node when it fails or is
  // interrupted; here we wait for all, and pass a Ctrl-C on by closing
  // their stdin (each sees ssh's channel close).
  using Clock = std::chrono::steady_clock;
  Clock::time_point stopping_since{};
  int first_failed = -1;  // the node whose ssh or een-launch failed first
  while (true) {
    here.Watch(std::chrono::milliseconds(50));
    bool all = true;
    for (size_t r = 0; r < nodes.size(); ++r) {
      all &= nodes[r]->exited();
      if (first_failed < 0 && nodes[r]->exited() && !nodes[r]->succeeded()) {
        first_failed = static_cast<int>(r);
      }
    }
    if (all) break;
    // A node that failed before its een-launch met the others (ssh could not
    // connect, say) leaves them waiting for its roles: stop them now. One
    // that had joined is the coordinator's to handle (a lost host's PS fail
    // over with --replicas 2): the others go on, or end with its verdict.
    const bool lost_before_joining = first_failed >= 0 && !nodes[first_failed]->saw_watched();
    if (stopping_since == Clock::time_point{} && (StopSignal() != 0 || lost_before_joining)) {
      if (StopSignal() != 0) {
        Say("interrupted by " + StopSignalName() +
            "; telling every host's een-launch to stop the job");
      }
      for (const auto& node : nodes) node->CloseInput();
      stopping_since = Clock::now();
    }
    if (stopping_since != Clock::time_point{} &&
        Clock::now() - stopping_since > 3 * config.failover_threshold + std::chrono::seconds(10)) {
      Say("some host's een-launch did not stop in time; ending its ssh");
      break;
    }
  }
  here.StopAll(std::chrono::milliseconds(3000));
  if (StopSignal() != 0) {
    Say("job interrupted; every host's een-launch stopped");
    return 130;
  }
  if (first_failed >= 0 && nodes[0]->succeeded() && nodes[first_failed]->saw_watched()) {
    // Node 0's een-launch (with the coordinator) finished the job well: the
    // failed host was lost while it ran, and the job went on without it.
    const RoleProcess& node = *nodes[first_failed];
    Say("job finished; host " + job.hosts[first_failed].host + " was lost while it ran (" +
        (node.last_line().empty() ? "een-launch there " + node.ExitDescription()
                                  : node.last_line()) +
        ") and the job went on without it");
    return 0;
  }
  if (first_failed >= 0) {
    // 255: ssh itself failed (no route, refused key): its last line says why.
    const RoleProcess& node = *nodes[first_failed];
    Say("job failed: " + job.hosts[first_failed].host + ": " +
        (node.last_line().empty() ? "een-launch there " + node.ExitDescription()
                                  : node.last_line()));
    return 1;
  }
  Say("job finished on every host");
  return 0;
}

}  // namespace een
