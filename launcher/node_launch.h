// Per-node launch, torchrun style: one een-launch on each of N hosts,
//   een-launch --nnodes N --node-rank R --rdzv HOST:PORT
//              --ps-per-node P --workers-per-node W -- PROGRAM ARGS...
// The launchers meet at the rendezvous address: node 0's een-launch starts
// the coordinator listening there; every launcher (node 0's too) waits for
// its answer, then starts and supervises its own node's roles. Ranks are
// node-rank-major (with P and W per node, node R runs PS R*P .. R*P+P-1
// and workers R*W .. R*W+W-1; given the job's totals, each node a
// consecutive share), so rank 0 always logs on node 0. Every launcher holds the same
// job secret (--secret-file, or EEN_JOB_SECRET): connections between hosts
// are authenticated and encrypted with it (CURVE). Any launcher's Ctrl-C or
// failure ends the job on every node, with its reason.
//
// The coordinator runs on node 0 only: losing node 0's host ends the job
// (the other launchers say so once it stays silent); see coordinator_link.h.
// A plain value type and the backend's entry point.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"
#include "launcher/elastic_nodes.h"

namespace een {

struct NodeLaunch {
  int nnodes = 1;
  int node_rank = 0;
  int ps = 0;  // the job's
  int workers = 0;
  int first_ps = 0;  // this node's ranks: first_ps .. first_ps + ps_here - 1
  int ps_here = 0;
  int first_worker = 0;
  int workers_here = 0;
  std::string rdzv;                 // as given: HOST:PORT
  std::string coordinator_address;  // tcp://IP:PORT: where node 0's coordinator listens
  std::string address;              // this node's address: its roles listen there
  std::string name;                 // the node's name (EEN_NODE): HOSTNAME@ADDRESS
  std::string secret;               // the job secret every node shares ("" with --insecure)
  bool watch_stdin = false;         // started over ssh: stdin closing ends the job (see below)
  // --nnodes MIN:MAX (elastic_nodes.h): nnodes is MAX, ps/workers the first
  // MIN nodes' totals, and this node's first ranks come from the coordinator.
  ElasticNodes elastic;

  bool hosts_coordinator() const { return node_rank == 0; }
};

// Either per-node counts (every node the same) or the job's totals (split
// node-rank-major: the first nodes take one more when they do not divide).
struct NodeLaunchFlags {
  int nnodes = 0;
  int min_nodes = 0;  // --nnodes MIN:MAX: MIN (nnodes: MAX); 0: a fixed count
  std::chrono::milliseconds last_call{10000};  // --rdzv-last-call
  int node_rank = -1;
  std::string rdzv;
  int ps_per_node = -1;
  int workers_per_node = -1;
  int ps = -1;  // totals, when no per-node count is given
  int workers = -1;
  std::string host;         // --host: this node's address ("": the one that reaches HOST)
  std::string secret_file;  // --secret-file ("": EEN_JOB_SECRET)
  bool insecure = false;
  // Started by the ssh backend (ssh_job.h): explicit shares "FIRST:COUNT"
  // of the job's --ps/--workers, and the secret on stdin's first line;
  // stdin closing (ssh ended) then ends the job like a Ctrl-C.
  std::string ps_share, workers_share;
  bool stdin_secret = false;
  // Then (or first, with --insecure) the launching host's environment
  // (forwarded_environment.h), set here before anything starts.
  bool stdin_env = false;
  // How long node 0's name may take to resolve (a pod or host starting).
  std::chrono::milliseconds resolve_timeout{0};
};

// Checks the flags (each error names the flag and the fix), resolves the
// rendezvous address and this node's address, reads the secret.
Result<NodeLaunch> MakeNodeLaunch(const NodeLaunchFlags& flags);

// "HOST:PORT" or "[V6]:PORT" -> host (brackets dropped), port 1-65535;
// InvalidArgument "'TEXT' has no port" or "'TEXT': port 'P' is not 1-65535".
Status SplitHostPort(const std::string& text, std::string* host, int* port);

// The exit code for een-launch: this node's share of the job, supervised.
int RunNodeJob(JobConfig config, const NodeLaunch& node, const std::vector<std::string>& command,
               const std::string& bin_dir);

}  // namespace een
