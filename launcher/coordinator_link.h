// CoordinatorLink: a node's een-launch and the job's coordinator, in a
// per-node launch (een-launch --nnodes N --node-rank R --rdzv HOST:PORT).
//
// Every heartbeat interval the link asks the coordinator how the job
// stands (a NodeStatus naming the node and its counts, and what this
// host's /proc says of each of its roles: WatchRoles); the first answer is
// the rendezvous (the node's roles start only then). EndJob() tells the
// coordinator to end the job on every node for a reason (this node's
// Ctrl-C, or its roles' failure), or to end it for every node to start every
// worker again (--max-restarts, for jobs whose workers no replacement can
// join). Answers from a coordinator of an earlier run of the job (still
// lingering) are not heard; one of a later run means this node missed that
// restart: it restarts too.
//
// RemoteCoordinator is the coordinator as a node other than node 0 sees it
// (the RoleProcess in the supervisor's coordinator slot): running while it
// answers; ended well once the job finished (shutdown); failed once it
// aborted the job (the verdict is its reason), refused this launcher, or
// stayed silent past `silence_limit` (node 0's host or its een-launch is
// gone: the coordinator is a single point of failure).
// Thread safety: single-threaded (the launcher's loop).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/connection.h"
#include "launcher/coordinator_messages.h"
#include "launcher/launcher_messages.h"
#include "launcher/process_host.h"
#include "schema/een.capnp.h"

namespace een {

class CoordinatorLink {
 public:
  // `node`: who asks (its pid is this process's).
  CoordinatorLink(std::string address, launcher_messages::NodeStatusFields node,
                  std::chrono::milliseconds interval);

  // `pids` gives the pids of this node's running roles, for each question:
  // the coordinator then tells a slow role of this host from a stopped or
  // gone one (process_sighting.h), as it does for its own host's.
  void WatchRoles(std::function<std::vector<int>()> pids) { role_pids_ = std::move(pids); }
  // Asks again if an interval passed since the last question; reads every
  // answer waiting (never blocks).
  void Poll();
  // Asks now and waits up to `wait` for the answer.
  void Refresh(std::chrono::milliseconds wait);
  // Whether the coordinator answered at all (the rendezvous).
  bool heard() const { return heard_; }
  // Since the last answer (or since the first question, before any).
  long SilentMs() const;
  wire::JobState state() const { return state_; }
  // The job ended for every node to start every worker again (see EndJob).
  bool restart_every_worker() const { return restart_every_worker_; }
  const std::string& reason() const { return reason_; }    // aborted: why
  const std::string& refused() const { return refused_; }  // why this launcher is not in the job
  bool DeclaredLost(int pid) const;
  // An elastic job: this node's ranks once given, and how many nodes met.
  const coordinator_messages::NodeShare& share() const { return share_; }
  // Ends the job on every node for `reason` (unless it is over already);
  // waits up to `wait` for the coordinator's answer. False: none came.
  // `restart`: for every node to start every worker again.
  bool EndJob(const std::string& reason, std::chrono::milliseconds wait, bool restart = false);

 private:
  using Clock = std::chrono::steady_clock;
  void Ask(const std::string& failure, bool restart = false);
  // Reads one answer, waiting up to `timeout`; false when none came.
  bool Read(std::chrono::milliseconds timeout);

  std::string address_;
  launcher_messages::NodeStatusFields node_;
  std::function<std::vector<int>()> role_pids_;
  std::chrono::milliseconds interval_;
  std::unique_ptr<transport::Connection> connection_;
  Clock::time_point asked_at_{}, first_asked_{}, heard_at_{};
  bool heard_ = false;
  wire::JobState state_ = wire::JobState::STARTING;
  std::string reason_, refused_;
  bool restart_every_worker_ = false;
  std::vector<int> lost_pids_;
  coordinator_messages::NodeShare share_;
};

class RemoteCoordinator : public RoleProcess {
 public:
  // `snapshots`: the job writes snapshots (a verdict may suggest --resume).
  RemoteCoordinator(CoordinatorLink* link, std::chrono::milliseconds silence_limit, bool snapshots)
      : link_(link), silence_limit_(silence_limit), snapshots_(snapshots) {}
  // Polls the link and updates what the coordinator looks like from here.
  void Update();
  // Why it ended (the coordinator's verdict, or why it is gone); "" while it runs.
  const std::string& verdict() const { return verdict_; }
  // It ended by falling silent (node 0's host or een-launch gone).
  bool silent() const { return silent_; }

  const std::string& label() const override { return label_; }
  pid_t pid() const override { return 0; }  // on node 0: not a process of this host
  bool running() const override { return !exited_; }
  bool exited() const override { return exited_; }
  bool succeeded() const override { return exited_ && verdict_.empty(); }
  bool killed_by_signal() const override { return false; }
  int term_signal() const override { return 0; }
  std::string ExitDescription() const override;
  const std::string& last_line() const override { return verdict_; }
  void Signal(int) const override {}  // node 0's een-launch stops it

 private:
  CoordinatorLink* link_;
  std::chrono::milliseconds silence_limit_;
  bool snapshots_;
  bool silent_ = false;
  std::string label_ = "coordinator";
  bool exited_ = false;
  std::string verdict_;
};

}  // namespace een
