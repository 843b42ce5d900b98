// JobSupervisor: what a job needs from een-launch, whatever starts its
// processes: the coordinator first (its address read from a pipe), then the
// PS, the workers (the user's command) and the spares, each from JobPlan, on
// the ProcessHost the placement gives; then it supervises them:
//  - every worker exits 0 -> waits for the coordinator and PS to finish -> 0;
//  - any process fails or dies -> gives the coordinator a moment to name the
//    process and step, stops every process (SIGTERM, then SIGKILL) -> 1;
//  - a PS dies while the job can recover it (replicas 2 or snapshots, or
//    before the job started) -> a replacement is started (up to 3 times);
//  - with --spare-ps K, K standby PS processes wait; the coordinator gives a
//    lost PS's rank to one of them, and a new spare is started;
//  - a worker fails or dies, with --max-restarts K -> a replacement with the
//    same rank is started (up to K in all) and joins the running job;
//  - the coordinator killed by a signal while the job runs -> restarted (up
//    to 3 times) on the same address, from its saved state;
//  - SIGINT/SIGTERM/SIGHUP to een-launch -> stops every process -> 130.
// Beside the coordinator it runs the job's c10d store (torch.distributed's
// rendezvous, JobPlan::C10dStore) unless --c10d-store off: restarted on
// the same port if it dies while the job runs (up to 3 times).
// Before a replacement starts, the coordinator is told that the old process
// is gone, so its rank is free at once. No process outlives Run(), and the
// run folder is removed.
// Per-node launch (node_launch.h): it runs its node's share of the roles
// only, and the coordinator only on node 0; every node's supervisor first
// meets the coordinator at the rendezvous, then supervises as above. On
// other nodes the coordinator's slot holds a RemoteCoordinator (what the
// coordinator's answers say). Its Ctrl-C or failure ends the job on every
// node (CoordinatorLink::EndJob), with the reason.
// Thread safety: call Run() once, from main.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/transport/device.h"
#include "launcher/coordinator_link.h"
#include "launcher/job_plan.h"
#include "launcher/node_launch.h"
#include "launcher/process_host.h"

namespace een {

class JobSupervisor {
 public:
  // Where a role runs: "ps" (spares too) or "worker", and its rank. The
  // coordinator always runs on `here`, the launcher's own host.
  using Placement = std::function<ProcessHost*(const std::string& role, int rank)>;

  // `node`: a per-node launch's node (nullopt: the whole job, here).
  // `restart`: how many times the whole job was started again before this
  // run (every worker's TORCHELASTIC_RESTART_COUNT starts there).
  JobSupervisor(JobPlan plan, ProcessHost* here, Placement place,
                std::optional<NodeLaunch> node = std::nullopt, int restart = 0)
      : plan_(std::move(plan)),
        here_(here),
        place_(std::move(place)),
        node_(std::move(node)),
        restart_(restart) {
    plan_.set_attempt(restart);
  }

  // The exit code for een-launch.
  int Run();
  // After Run(): a worker failed in a job where no replacement can stand
  // in for one (--ps 0: the program's own gradients; torch.distributed's
  // een backend), restarts are left (--max-restarts), and every process
  // was stopped: the caller starts the whole job again, as torchrun does.
  bool wants_restart() const { return wants_restart_; }

 private:
  const JobConfig& config() const { return plan_.config(); }
  enum class Role { kCoordinator, kPs, kWorker, kSpare };
  struct Slot {
    Role role;
    int rank;  // a PS's or worker's (a spare's: its number)
  };
  bool IsWorker(size_t slot) const { return roles_[slot].role == Role::kWorker; }
  // The workers this een-launch runs (all of them, or its node's).
  int LocalWorkers() const { return node_ ? node_->workers_here : config().workers; }
  bool HostsCoordinator() const { return !node_ || node_->hosts_coordinator(); }
  // The node's name in a per-node launch (pids repeat across hosts), else "".
  std::string NodeName() const { return node_ ? node_->name : ""; }
  // Per-node launch: waits for the coordinator's first answer (the rendezvous).
  Status Rendezvous();
  // Per-node launch: ends the job on every node for `reason`.
  void EndJobEverywhere(const std::string& reason);
  // Starts the coordinator in slot 0; `restore` restarts it on the same
  // address from its saved state, replacing the dead one.
  Status StartCoordinator(bool restore);
  Status StartRoles();
  // Starts `spec` on `host` into slot `slot` (appended when past the end).
  Status StartInto(size_t slot, Slot role, ProcessHost* host, ProcessSpec spec);
  Status StartPs(size_t slot, int rank);
  Status StartSpare(size_t slot);
  // `local_rank`: its LOCAL_RANK (-1: its place among this node's ranks).
  Status StartWorker(size_t slot, int rank, int local_rank = -1);
  // Writes worker `rank`'s own credential where its environment names it
  // (JobPlan::CredentialPath); nothing with --insecure.
  Status WriteWorkerCredential(int rank);
  // Starts the c10d store (not a slot: no role of the job) on `port`;
  // AwaitC10dStore() then reads the port it listens on into the plan.
  Status LaunchC10dStore(int port);
  Status AwaitC10dStore();
  // Reads the one line `process` writes to `fd` once it listens (its
  // address or port) into *line; closes `fd`. Unavailable, saying how
  // `process` (`what`) ended, when none comes within `patience`.
  Status ReadReadyLine(int fd, const RoleProcess& process, const std::string& what,
                       std::string* line,
                       std::chrono::milliseconds patience = std::chrono::milliseconds(10000));
  void Watch(std::chrono::milliseconds timeout);
  void StopAll();
  int Fail(const std::string& reason);
  // A worker failed (`reason`) where only a restart of every worker helps:
  // stops everything and sets wants_restart() when restarts are left, else
  // fails.
  int RestartEveryWorker(const std::string& reason);
  // Per-node launch: the coordinator ended the job for every node to start
  // its workers again (checked wherever a role's end may come from that).
  bool ToldToRestartEveryWorker() const { return link_ && link_->restart_every_worker(); }
  Status CreateSecret();
  std::string CoordinatorVerdict() const;
  // Whether the coordinator declared this worker process lost.
  bool DeclaredLost(const RoleProcess& worker) const;
  // Whether the coordinator saw this worker process join (its --joined-file).
  bool Joined(const RoleProcess& worker) const;
  void TellCoordinatorWorkerExited(int rank, const RoleProcess& worker);
  // Before a replacement starts: tells the coordinator that `process` ended
  // (`what`), so it is lost at once and its rank free; waits for the answer:
  // whether the job had started, and whether the process (a worker) had
  // finished training already (nullopt: no answer within 5 s).
  struct GoneReply {
    bool started = true;
    bool finished = false;
    bool restart_all = false;  // no replacement can stand in: every worker starts again
  };
  std::optional<GoneReply> TellCoordinatorProcessGone(const RoleProcess& process,
                                                      const std::string& what);
  Status ConnectToCoordinator();

  JobPlan plan_;
  ProcessHost* here_;
  Placement place_;
  std::vector<ProcessHost*> hosts_;  // every host a process was started on, `here_` first
  // [0] coordinator, PS, workers, then spares; a replacement takes its slot.
  std::vector<std::shared_ptr<RoleProcess>> slots_;
  std::vector<Slot> roles_;  // what each slot holds
  std::optional<NodeLaunch> node_;
  std::unique_ptr<CoordinatorLink> link_;      // per-node launch only
  std::shared_ptr<RemoteCoordinator> remote_;  // per-node launch, nodes but 0
  bool stdin_closed_ = false;                  // started over ssh, and ssh ended
  int coordinator_restarts_ = 0;
  int ps_restarts_ = 0;
  int worker_restarts_ = 0;
  int restart_ = 0;  // the whole job's restarts before this run
  bool wants_restart_ = false;
  std::map<int, int> incarnations_;     // worker rank -> processes started for it so far
  std::map<int, int> local_ranks_;      // worker rank -> its LOCAL_RANK, when not rank - first
  std::shared_ptr<RoleProcess> store_;  // the c10d store (nullptr: none)
  int store_ready_fd_ = -1;             // where it says its port, until read
  int store_restarts_ = 0;
  int spares_started_ = 0;
  std::set<int> adopted_;  // workers of lost nodes this node started replacements for
  std::unique_ptr<transport::Connection> coordinator_;  // opened at the first worker exit
};

}  // namespace een
