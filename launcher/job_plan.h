// JobPlan: what each role of a job is given: its command line and its EEN_*
// environment (coordinator address, role, rank, counts, transport, timings,
// the job secret's file, snapshot settings), and the files of the job's run
// folder that roles and een-launch share (secret, verdict, lost list).
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
  ProcessSpec Ps(int rank) const;
  // The n-th standby PS (a placeholder rank above the PS ranks).
  ProcessSpec Spare(int n) const;
  // The user's program, on a pseudo-terminal (its lines show up as written).
  ProcessSpec Worker(int rank) const;

  // The job secret's file (0600): every role authenticates with it, unless --insecure.
  std::string SecretPath() const { return run_dir_ + "/secret"; }
  // Why the coordinator aborted the job (empty: it did not).
  std::string VerdictPath() const { return run_dir_ + "/verdict"; }
  // "rank pid" lines: the worker processes the coordinator declared lost.
  std::string LostPath() const { return run_dir_ + "/lost"; }
  // Where the coordinator adds each worker that joins (RANK PID per line).
  std::string JoinedPath() const { return run_dir_ + "/joined"; }

 private:
  std::map<std::string, std::string> RoleEnvironment(const std::string& role, int rank) const;
  std::map<std::string, std::string> SecurityEnvironment() const;

  JobConfig config_;
  std::vector<std::string> command_;
  std::string bin_dir_;
  std::string run_dir_;
  std::string coordinator_address_;
  std::string coordinator_listen_;
  std::string node_;
  int workers_here_ = 0;  // 0: every worker on this host
  ElasticNodes elastic_;
};

// The flags every node of a per-node launch must share, as one text
// ("replicas=2 min-workers=0 ..."): the coordinator refuses a node whose
// text differs from node 0's, naming the flags.
std::string JobWideSettings(const JobConfig& config);

}  // namespace een
