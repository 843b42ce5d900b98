// The ssh launch backend: one command on one machine starts a job on the
// hosts of a hostfile, over OpenSSH.
//
//   een-launch --hostfile hosts.txt --ps 4 --workers 32 -- ./train ...
//
// hosts.txt lists one host per line, MPI style: `node1 slots=8` (slots:
// how many workers it takes; default 1; `#` starts a comment). Workers fill
// the hosts' slots in order (node-rank-major, like mpirun --map-by slot),
// PS are spread evenly over the hosts (so with --replicas 2 every shard's
// backup can sit on another host than its primary). The first host is
// node 0: it runs the coordinator, and the others meet it at
// HOST0:--rdzv-port.
//
// On each host een-launch runs `ssh -o BatchMode=yes [--ssh-args] HOST
// 'cd CWD && exec BIN/een-launch ... --nnodes N --node-rank R --node-ps
// A:B --node-workers C:D --stdin-secret -- PROGRAM ...'`: a per-node launch
// (node_launch.h) with the same paths as here (like mpirun, EEN and the
// program must be installed at the same place on every host). The user's
// own keys and ssh configuration are used; nothing is copied. The job
// secret and this host's environment (forwarded_environment.h: what the
// user set here, not the session's own variables) travel on ssh's stdin
// (never on a command line; --stdin-secret --stdin-env), which stays
// open: when this een-launch stops or dies, every remote een-launch sees
// its stdin close and ends the job, so no process is left on any host.
// Every line comes back prefixed with its host and role: `[node2 ps 1] ...`.
// Thread safety: single-threaded (the launcher's loop).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"

namespace een {

struct HostfileEntry {
  std::string host;
  int slots = 1;
};

// Reads a hostfile; every error names the line.
Result<std::vector<HostfileEntry>> ReadHostfile(const std::string& path);

struct SshJob {
  std::vector<HostfileEntry> hosts;
  std::vector<std::string> ssh_args;  // --ssh-args, split on spaces
  int rdzv_port = 29500;
  // The user's een-launch flags that every node gets too (replicas,
  // snapshots, timings, ...), as given.
  std::vector<std::string> job_flags;
  // --env: variables forwarded to every host even where they are the
  // session's own (their values are in this process's environment).
  std::set<std::string> env_names;
};

// Node r's share of the job's workers (slots filled in order) and PS
// (spread evenly): {first, count} each. An error when the workers need
// more slots than the hostfile has.
struct NodeShares {
  int first_ps = 0, ps = 0, first_worker = 0, workers = 0;
};
Result<std::vector<NodeShares>> PlanShares(const std::vector<HostfileEntry>& hosts, int ps,
                                           int workers);

// The exit code for een-launch.
int RunSshJob(const JobConfig& config, const SshJob& job, const std::vector<std::string>& command,
              const std::string& bin_dir);

}  // namespace een
