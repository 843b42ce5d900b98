// JobPlan: what each role of a job is given: its command line and its EEN_*
// environment (coordinator address, role, rank, counts, transport, timings,
// the job secret's file, snapshot settings), and the files of the job's run
// folder that roles and een-launch share (secret, verdict, lost list).
// Workers also get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_ADDR/MASTER_PORT of the job's c10d store, ...), so that
// torch.distributed's env:// initialisation works in them unchanged.
//
// It decides nothing about where or when a role runs (that is the
// supervisor's and the ProcessHost's), so every launch backend gives its
// roles the same environment.
// Thread safety: const after construction, but for the setters.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "launcher/elastic_nodes.h"
#include "launcher/process_host.h"

namespace een {

// een-coordinator's exit status when a worker of a job that takes no
// replacement of one worker (torch.distributed's een backend) was lost by
// its silence (stopped, cut off) and --max-restarts allows a restart:
// een-launch then starts every worker again, as when one ends.
constexpr int kCoordinatorExitRestartEveryWorker = 4;

class JobPlan {
 public:
  JobPlan(JobConfig config, std::vector<std::string> command, std::string bin_dir,
          std::string run_dir)
      : config_(std::move(config)),
        command_(std::move(command)),
        bin_dir_(std::move(bin_dir)),
        run_dir_(std::move(run_dir)) {}

  const JobConfig& config() const { return config_; }
  const std::vector<std::string>& command() const { return command_; }
  const std::string& run_dir() const { return run_dir_; }
  const std::string& coordinator_address() const { return coordinator_address_; }
  void set_coordinator_address(std::string address) { coordinator_address_ = std::move(address); }
  // Per-node launch: the node's name (its roles' EEN_NODE) and how many
  // workers run on it (they share its cores).
  void set_node(std::string name, int workers_here) {
    node_ = std::move(name);
    workers_here_ = workers_here;
  }
  const std::string& node() const { return node_; }
  // Per-node launch: torchrun's GROUP_RANK and GROUP_WORLD_SIZE (node rank,
  // nodes), and this node's first worker rank (its LOCAL_RANK 0).
  void set_node_ranks(int node_rank, int nnodes, int first_worker) {
    node_rank_ = node_rank;
    nnodes_ = nnodes;
    first_worker_ = first_worker;
  }
  // Where the job's c10d store listens (the workers' MASTER_ADDR and
  // MASTER_PORT); "" (the default): there is none.
  void set_c10d_store(std::string host, int port) {
    store_host_ = std::move(host);
    store_port_ = port;
  }
  int c10d_store_port() const { return store_port_; }
  // Per-node launch over many hosts: the interface this node's roles use
  // (its address's). Workers get it as GLOO_SOCKET_IFNAME and
  // TP_SOCKET_IFNAME unless the user set those: gloo would otherwise bind
  // to what the host name resolves to, often a loopback address.
  void set_torch_interface(std::string name) { torch_interface_ = std::move(name); }
  // The job's restarts before this run (a per-node launch's coordinator tells its nodes).
  void set_attempt(int attempt) { attempt_ = attempt; }
  // "HOST:PORT" of the c10d store ("" when none), as the rendezvous tells it.
  std::string c10d_store() const {
    return store_host_.empty() ? "" : store_host_ + ":" + std::to_string(store_port_);
  }
  // Where the coordinator listens (default: tcp://HOST:0, any free port).
  void set_coordinator_listen(std::string address) { coordinator_listen_ = std::move(address); }
  // An elastic per-node launch: the coordinator's rendezvous rules.
  void set_elastic(const ElasticNodes& elastic) { elastic_ = elastic; }
  // The job's counts, once an elastic rendezvous gave them (EEN_NUM_PS,
  // EEN_WORLD_SIZE of roles started from now on).
  void set_counts(int ps, int workers) {
    config_.ps = ps;
    config_.workers = workers;
  }

  // The coordinator; `restore`: on its old address, from its saved state.
  // It writes the address it listens on, one line, to `ready_fd`.
  ProcessSpec Coordinator(bool restore, int ready_fd) const;
  // The c10d store on `port` (0: any free one); it writes the port it
  // listens on, one line, to `ready_fd`.
  ProcessSpec C10dStore(int port, int ready_fd) const;
  ProcessSpec Ps(int rank) const;
  // The n-th standby PS (a placeholder rank above the PS ranks).
  ProcessSpec Spare(int n) const;
  // The user's program, on a pseudo-terminal (its lines show up as written);
  // `restarts`: how many processes held this rank before (torchrun's
  // TORCHELASTIC_RESTART_COUNT); `local_rank`: its LOCAL_RANK (-1: its
  // place among this node's workers).
  ProcessSpec Worker(int rank, int restarts = 0, int local_rank = -1) const;

  // The job secret's file (0600): every role authenticates with it, unless --insecure.
  std::string SecretPath() const { return run_dir_ + "/secret"; }
  // Where worker `rank`'s own credential is (een-launch writes it before the
  // worker starts; the worker gets this file, not the secret).
  std::string CredentialPath(int rank) const {
    return run_dir_ + "/credentials/worker-" + std::to_string(rank);
  }
  // Why the coordinator aborted the job (empty: it did not).
  std::string VerdictPath() const { return run_dir_ + "/verdict"; }
  // "rank pid" lines: the worker processes the coordinator declared lost.
  std::string LostPath() const { return run_dir_ + "/lost"; }
  // Where the coordinator adds each worker that joins (RANK PID per line).
  std::string JoinedPath() const { return run_dir_ + "/joined"; }

 private:
  std::map<std::string, std::string> RoleEnvironment(const std::string& role, int rank) const;
  std::map<std::string, std::string> SecurityEnvironment() const;
  std::map<std::string, std::string> TorchrunEnvironment(int rank, int restarts,
                                                         int local_rank) const;

  JobConfig config_;
  std::vector<std::string> command_;
  std::string bin_dir_;
  std::string run_dir_;
  std::string coordinator_address_;
  std::string coordinator_listen_;
  std::string node_;
  int workers_here_ = 0;  // 0: every worker on this host
  int node_rank_ = 0, nnodes_ = 1, first_worker_ = 0;
  std::string store_host_;
  std::string torch_interface_;
  int attempt_ = 0;
  int store_port_ = 0;
  ElasticNodes elastic_;
};

// The flags every node of a per-node launch must share, as one text
// ("replicas=2 min-workers=0 ..."): the coordinator refuses a node whose
// text differs from node 0's, naming the flags.
std::string JobWideSettings(const JobConfig& config);

}  // namespace een
