// LocalJob: a whole job on this machine (the `local` launch backend).
//
// Run() starts the coordinator, waits until it listens, then the PS
// processes and the workers (the user's command), each with the EEN_*
// environment that tells it its role. It forwards every child's output,
// prefixed with its role and rank, and supervises them:
//  - every worker exits 0 -> waits for the coordinator and PS to finish -> 0;
//  - any child fails or dies -> gives the coordinator a moment to name the
//    process and step, stops every child (SIGTERM, then SIGKILL) -> 1;
//  - a PS dies while snapshots are on -> a replacement is started (up to 3
//    times) and the job rolls back to its last complete snapshot;
//  - with --spare-ps K, K standby PS processes wait; the coordinator gives a
//    lost PS's rank to one of them, and a killed PS or spare is followed by
//    a new spare (up to 3 times);
//  - a worker fails or dies, with --max-restarts K -> a replacement with the
//    same rank is started (up to K in all) and joins the running job;
//  - the coordinator killed by a signal while the job runs -> restarted (up
//    to 3 times) on the same address, from its saved state: training goes on;
//  - SIGINT/SIGTERM to een-launch -> stops every child -> 130.
// No child outlives Run(). Thread safety: call Run() once, from main.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/transport/device.h"
#include "launcher/child_process.h"

namespace een {

class LocalJob {
 public:
  LocalJob(JobConfig config, std::vector<std::string> command, std::string bin_dir)
      : config_(std::move(config)), command_(std::move(command)), bin_dir_(std::move(bin_dir)) {}

  // The exit code for een-launch.
  int Run();

 private:
  // Starts the coordinator; `restore` restarts it on the same address from
  // its saved state, replacing the dead one.
  Status StartCoordinator(bool restore);
  Status StartRoles();
  ChildProcess PsProcess(int rank) const;      // not started yet
  ChildProcess SpareProcess();                 // a standby PS, not started yet
  ChildProcess WorkerProcess(int rank) const;  // the user's program, not started yet
  std::map<std::string, std::string> RoleEnvironment(const std::string& role, int rank) const;
  // The job secret (0600 in the run folder, SecretPath()) that every role
  // authenticates with, unless --insecure; and the environment naming it.
  Status CreateSecret();
  std::string SecretPath() const;
  std::map<std::string, std::string> SecurityEnvironment() const;
  void PumpOutput(int timeout_ms);
  void ReapChildren();
  void StopAll();
  int Fail(const std::string& reason);
  // Where the coordinator writes why it aborted the job, and what it wrote ("": nothing).
  std::string VerdictPath() const;
  std::string CoordinatorVerdict() const;
  // Whether the coordinator declared this worker process lost.
  bool DeclaredLost(const ChildProcess& worker) const;
  void TellCoordinatorWorkerExited(int rank, const ChildProcess& worker);
  // Before a replacement starts: tells the coordinator that `process` ended
  // (`what`), so it is lost at once and its rank free; waits for the answer:
  // whether the job had started, and whether the process (a worker) had
  // finished training already (nullopt: no answer within 5 s).
  struct GoneReply {
    bool started = true;
    bool finished = false;
  };
  std::optional<GoneReply> TellCoordinatorProcessGone(const ChildProcess& process,
                                                      const std::string& what);
  Status ConnectToCoordinator();

  JobConfig config_;
  std::vector<std::string> command_;
  std::string bin_dir_;
  std::string run_dir_;
  std::string coordinator_address_;
  std::vector<ChildProcess> children_;  // [0] coordinator, PS, workers, then spares
  int coordinator_restarts_ = 0;
  int ps_restarts_ = 0;
  int worker_restarts_ = 0;
  int spares_started_ = 0;
  std::unique_ptr<transport::Connection> coordinator_;  // opened at the first worker exit
};

}  // namespace een
