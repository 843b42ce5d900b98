#include "launcher/job_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "common/logging.h"
#include "common/private_folder.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "launcher/launcher_messages.h"
#include "launcher/say.h"
#include "launcher/stop_signal.h"

namespace een {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

long MillisSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

// Whether a worker's last line says it failed because a peer went first (gloo's and NCCL's words
// for a closed connection): such a worker is a consequence, not the cause.
bool ReadsAsAPeersLoss(const std::string& line) {
  for (const char* words : {"Connection closed by peer", "Connection reset by peer", "Broken pipe",
                            "remote process exited"}) {
    if (line.find(words) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

Status JobSupervisor::CreateSecret() {
  if (plan_.run_dir().empty()) {
    return Unavailable("cannot create the job's run folder in /tmp (full, or not writable?)");
  }
  if (config().insecure) {
    Say("--insecure: no job secret; any process on this host can connect to this job and "
        "disturb it");
    transport::SetCredentials({"", "launcher"});
    return Status::Ok();
  }
  // A per-node launch's nodes share the secret the user gave each.
  const std::string secret = node_ ? node_->secret : transport::NewSecret();
  if (secret.empty()) return Internal("cannot draw a random job secret (libsodium failed)");
  EEN_RETURN_IF_ERROR(transport::WriteSecretFile(plan_.SecretPath(), secret));
  transport::SetCredentials({secret, "launcher"});
  return Status::Ok();
}

Status JobSupervisor::StartInto(size_t slot, Slot role, ProcessHost* host, ProcessSpec spec) {
  if (std::find(hosts_.begin(), hosts_.end(), host) == hosts_.end()) hosts_.push_back(host);
  EEN_ASSIGN_OR_RETURN(auto process, host->Start(std::move(spec)));
  if (slot < slots_.size()) {
    slots_[slot] = std::move(process);
    roles_[slot] = role;
  } else {
    slots_.push_back(std::move(process));
    roles_.push_back(role);
  }
  return Status::Ok();
}

Status JobSupervisor::StartPs(size_t slot, int rank) {
  return StartInto(slot, {Role::kPs, rank}, place_("ps", rank), plan_.Ps(rank));
}

Status JobSupervisor::StartSpare(size_t slot) {
  const int n = spares_started_++;
  return StartInto(slot, {Role::kSpare, n}, place_("ps", config().ps + n), plan_.Spare(n));
}

Status JobSupervisor::WriteWorkerCredential(int rank) {
  const transport::Credentials launcher = transport::CurrentCredentials();
  if (config().insecure || launcher.secret.empty()) return Status::Ok();
  const std::string path = plan_.CredentialPath(rank);
  std::error_code ec;
  MakePrivateFolder(std::filesystem::path(path).parent_path(), ec);
  // A replacement gets the same credential, written anew.
  std::filesystem::remove(path, ec);
  return transport::WriteCredentialFile(
      path, transport::OwnCredential(launcher.secret, transport::WorkerIdentity(rank)));
}

Status JobSupervisor::StartWorker(size_t slot, int rank, int local_rank) {
  EEN_RETURN_IF_ERROR(WriteWorkerCredential(rank));
  const int restarts = restart_ + incarnations_[rank]++;
  // A replacement keeps the LOCAL_RANK of the process it replaces.
  if (local_rank < 0 && local_ranks_.count(rank)) local_rank = local_ranks_[rank];
  if (local_rank >= 0) local_ranks_[rank] = local_rank;
  return StartInto(slot, {Role::kWorker, rank}, place_("worker", rank),
                   plan_.Worker(rank, restarts, local_rank));
}

Status JobSupervisor::ReadReadyLine(int fd, const RoleProcess& process, const std::string& what,
                                    std::string* line, milliseconds patience) {
  // One line. EOF first means it failed.
  line->clear();
  const auto start = Clock::now();
  while (line->find('\n') == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char buf[256];
      ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      line->append(buf, n);
    }
    here_->Watch(milliseconds(0));
    if (MillisSince(start) > patience.count()) break;
  }
  close(fd);
  if (line->find('\n') == std::string::npos) {
    // Say how it ended, if it did (killed before it listened, say).
    for (int i = 0; i < 20 && !process.exited(); ++i) here_->Watch(milliseconds(10));
    return Unavailable(what + " (pid " + std::to_string(process.pid()) + ") " +
                       (process.exited() ? process.ExitDescription() : "gave no address") +
                       " before it started listening" +
                       (process.killed_by_signal() ? "" : " (see its output above)"));
  }
  line->resize(line->find('\n'));
  return Status::Ok();
}

Status JobSupervisor::LaunchC10dStore(int port) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return Internal("pipe failed");
  if (std::find(hosts_.begin(), hosts_.end(), here_) == hosts_.end()) hosts_.push_back(here_);
  auto started = here_->Start(plan_.C10dStore(port, ready[1]));
  close(ready[1]);
  if (!started.ok()) {
    close(ready[0]);
    return started.status();
  }
  store_ = *started;
  store_ready_fd_ = ready[0];
  return Status::Ok();
}

Status JobSupervisor::AwaitC10dStore() {
  std::string line;
  const int fd = std::exchange(store_ready_fd_, -1);
  // It loads LibTorch first: seconds on a busy machine.
  EEN_RETURN_IF_ERROR(ReadReadyLine(fd, *store_, "the c10d store", &line, milliseconds(60000)));
  plan_.set_c10d_store(config().host, std::atoi(line.c_str()));
  return Status::Ok();
}

Status JobSupervisor::StartCoordinator(bool restore) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return Internal("pipe failed");
  Status s = StartInto(0, {Role::kCoordinator, 0}, here_, plan_.Coordinator(restore, ready[1]));
  close(ready[1]);
  if (!s.ok()) {
    close(ready[0]);
    return s;
  }
  std::string line;
  EEN_RETURN_IF_ERROR(ReadReadyLine(ready[0], *slots_[0], "the coordinator", &line));
  plan_.set_coordinator_address(line);
  // For eenctl on this machine: which job secret goes with this address.
  std::ofstream(plan_.run_dir() + "/coordinator") << plan_.coordinator_address() << '\n';
  return Status::Ok();
}

Status JobSupervisor::StartRoles() {
  // A per-node launch runs its node's ranks only (node-rank-major).
  const int first_ps = node_ ? node_->first_ps : 0;
  const int ps = node_ ? node_->ps_here : config().ps;
  const int first_worker = node_ ? node_->first_worker : 0;
  if (node_) plan_.set_node_ranks(node_->node_rank, node_->nnodes, first_worker);
  for (int r = first_ps; r < first_ps + ps; ++r) EEN_RETURN_IF_ERROR(StartPs(slots_.size(), r));
  for (int r = first_worker; r < first_worker + LocalWorkers(); ++r) {
    EEN_RETURN_IF_ERROR(StartWorker(slots_.size(), r));
  }
  for (int k = 0; k < config().spare_ps; ++k) EEN_RETURN_IF_ERROR(StartSpare(slots_.size()));
  return Status::Ok();
}

Status JobSupervisor::Rendezvous() {
  const ElasticNodes& elastic = node_->elastic;
  link_ = std::make_unique<CoordinatorLink>(
      plan_.coordinator_address(),
      launcher_messages::NodeStatusFields{
          .node = node_->node_rank,
          .nnodes = node_->nnodes,
          .ps = elastic.enabled() ? elastic.ps_per_node : node_->ps,
          .workers = elastic.enabled() ? elastic.workers_per_node : node_->workers,
          .host = node_->name,
          .min_nodes = elastic.min,
          .settings = JobWideSettings(config()),
          .attempt = restart_},
      config().heartbeat_interval);
  link_->WatchRoles([this] {
    std::vector<int> pids;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (roles_[i].role != Role::kCoordinator && slots_[i] && slots_[i]->running()) {
        pids.push_back(slots_[i]->pid());
      }
    }
    return pids;
  });
  Say("node " + std::to_string(node_->node_rank) + " of " + std::to_string(node_->nnodes) + " (" +
      node_->name + "): waiting for the rendezvous at " + node_->rdzv +
      (HostsCoordinator() ? " (this node's coordinator)" : " (node 0's coordinator)"));
  const auto start = Clock::now();
  int joined_said = 0;
  // Elastic: the rendezvous is over once the coordinator gave this node its ranks.
  auto met = [&] { return link_->heard() && (!elastic.enabled() || link_->share().assigned); };
  while (!met() && link_->refused().empty()) {
    link_->Poll();
    Watch(milliseconds(20));
    if (elastic.enabled() && link_->heard() && link_->share().nodes_joined != joined_said) {
      joined_said = link_->share().nodes_joined;
      Say(std::to_string(joined_said) + " of " + std::to_string(elastic.min) + ".." +
          std::to_string(elastic.max) + " nodes met the coordinator; the job starts with " +
          std::to_string(elastic.max) + ", or with at least " + std::to_string(elastic.min) +
          " once " + std::to_string(elastic.last_call.count()) + " ms pass without another");
    }
    if (StopSignal() != 0) return Status::Ok();  // Run() says it
    if (HostsCoordinator() && slots_[0]->exited()) {
      return Unavailable("the coordinator " + slots_[0]->ExitDescription() +
                         " before the rendezvous (see its output above)");
    }
    if (MillisSince(start) > config().startup_timeout.count()) {
      return Unavailable("no coordinator answered at " + node_->rdzv + " within " +
                         std::to_string(config().startup_timeout.count()) +
                         " ms (--startup-timeout): start node 0's een-launch with the same --rdzv, "
                         "check that this host reaches it (firewall, address), and that every "
                         "node has the same job secret");
    }
  }
  if (!link_->refused().empty()) return FailedPrecondition(link_->refused());
  if (elastic.enabled()) {  // this node's ranks and the job's counts, as the coordinator gave them
    const coordinator_messages::NodeShare& share = link_->share();
    node_->first_ps = share.first_ps;
    node_->first_worker = share.first_worker;
    node_->ps = share.num_ps;
    node_->workers = share.world_size;
    plan_.set_counts(share.num_ps, share.world_size);
  }
  if (!HostsCoordinator() && !link_->share().torch_store.empty()) {
    std::string host;
    int port = 0;
    if (Status s = SplitHostPort(link_->share().torch_store, &host, &port); !s.ok()) {
      return Internal("the coordinator named the workers' c10d store " + s.message());
    }
    plan_.set_c10d_store(host, port);
  }
  auto ranks = [](int first, int count) {
    return count == 0 ? std::string("none")
           : count == 1
               ? "rank " + std::to_string(first)
               : "ranks " + std::to_string(first) + "-" + std::to_string(first + count - 1);
  };
  Say("met the coordinator at " + plan_.coordinator_address() + " after " +
      std::to_string(MillisSince(start)) + " ms; starting this node's " +
      std::to_string(node_->ps_here) + " PS (" + ranks(node_->first_ps, node_->ps_here) + ") and " +
      std::to_string(node_->workers_here) + " workers (" +
      ranks(node_->first_worker, node_->workers_here) + ")");
  return Status::Ok();
}

void JobSupervisor::EndJobEverywhere(const std::string& reason) {
  // The coordinator ended it already (every node hears its reason), or it
  // is gone (node 0's: nothing to tell; others find it silent).
  if (!link_ || !link_->heard() || !CoordinatorVerdict().empty() || slots_.empty() ||
      slots_[0]->exited()) {
    return;
  }
  if (!link_->EndJob(reason, milliseconds(2000))) {
    Say("the coordinator at " + plan_.coordinator_address() +
        " did not answer within 2 s when told to end the job on every node (it may have ended "
        "it already)");
    return;
  }
  // Node 0: the coordinator lingers so that every node hears why; stopping
  // it now would cut that short.
  const auto start = Clock::now();
  while (HostsCoordinator() && !slots_[0]->exited() &&
         MillisSince(start) < 3 * config().heartbeat_interval.count() + 1000) {
    Watch(milliseconds(20));
  }
}

void JobSupervisor::Watch(milliseconds timeout) {
  if (node_ && node_->watch_stdin && !stdin_closed_) {
    // Started over ssh: the launching host's een-launch keeps our stdin
    // open; EOF means it (or its host, or the connection) is gone.
    pollfd in{STDIN_FILENO, POLLIN, 0};
    char buf[256];
    if (poll(&in, 1, 0) > 0 && read(STDIN_FILENO, buf, sizeof buf) <= 0) {
      stdin_closed_ = true;
      RaiseStopSignal(SIGHUP);
    }
  }
  if (remote_) {
    remote_->Update();
  } else if (link_) {
    link_->Poll();  // node 0: hears a verdict as early as the others do
  }
  // No process of its own yet (waiting for the rendezvous, or a node with
  // no role): pace the caller's loop.
  if (hosts_.empty()) std::this_thread::sleep_for(timeout);
  for (ProcessHost* host : hosts_) {
    host->Watch(timeout);
    timeout = milliseconds(0);  // one wait for all: the others only forward and reap
  }
}

void JobSupervisor::StopAll() {
  for (ProcessHost* host : hosts_) host->StopAll(milliseconds(3000));
  if (!plan_.run_dir().empty()) {
    std::error_code ec;
    std::filesystem::remove_all(plan_.run_dir(), ec);
  }
}

namespace {

// Whether one of the coordinator's "RANK PID" lines at `path` names `pid`.
bool ListsPid(const std::string& path, pid_t pid) {
  std::ifstream in(path);
  int rank;
  pid_t listed;
  while (in >> rank >> listed) {
    if (listed == pid) return true;
  }
  return false;
}

}  // namespace

bool JobSupervisor::DeclaredLost(const RoleProcess& worker) const {
  if (link_ && link_->DeclaredLost(worker.pid())) return true;
  return ListsPid(plan_.LostPath(), worker.pid());
}

bool JobSupervisor::Joined(const RoleProcess& worker) const {
  return ListsPid(plan_.JoinedPath(), worker.pid());
}

std::string JobSupervisor::CoordinatorVerdict() const {
  std::ifstream in(plan_.VerdictPath());
  std::string verdict{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (verdict.empty() && remote_) verdict = remote_->verdict();
  if (verdict.empty() && link_ && link_->state() == wire::JobState::ABORTED) {
    verdict = link_->reason();
  }
  return verdict;
}

Status JobSupervisor::ConnectToCoordinator() {
  if (coordinator_) return Status::Ok();
  EEN_ASSIGN_OR_RETURN(auto device, transport::DeviceFor(plan_.coordinator_address()));
  EEN_ASSIGN_OR_RETURN(coordinator_, device->Connect(plan_.coordinator_address()));
  return Status::Ok();
}

std::optional<JobSupervisor::GoneReply> JobSupervisor::TellCoordinatorProcessGone(
    const RoleProcess& process, const std::string& what) {
  if (!ConnectToCoordinator().ok()) return std::nullopt;
  if (!coordinator_->Send(launcher_messages::ProcessGone(process.pid(), what, NodeName())).ok()) {
    return std::nullopt;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    Watch(milliseconds(0));  // forward and reap, do not wait
    auto reply = coordinator_->Receive(milliseconds(50));
    if (!reply.ok()) continue;
    std::optional<GoneReply> answer;
    Ignored(wire::Visit(*reply,
                        [&](wire::Header::Reader h) -> Status {
                          if (h.isProcessGoneReply()) {
                            answer = GoneReply{h.getProcessGoneReply().getJobStarted(),
                                               h.getProcessGoneReply().getFinished(),
                                               h.getProcessGoneReply().getRestartAll()};
                          }
                          return Status::Ok();
                        }),
            "reading the coordinator's answer about a gone process");
    if (answer) return answer;
  }
  return std::nullopt;
}

void JobSupervisor::TellCoordinatorWorkerExited(int rank, const RoleProcess& worker) {
  if (!ConnectToCoordinator().ok()) return;
  if (Status s = coordinator_->Send(launcher_messages::WorkerExited(
          rank, worker.pid(), worker.succeeded() ? 0 : 1, NodeName()));
      !s.ok()) {
    Say("could not tell the coordinator that worker " + std::to_string(rank) +
        " exited: " + s.message());
  }
}

int JobSupervisor::Fail(const std::string& reason) {
  EndJobEverywhere(reason);  // per-node launch: every node stops, with this reason
  Say("job failed; stopping every process (the reason is the last line)");
  StopAll();
  Say("job failed: " + reason);
  return 1;
}

int JobSupervisor::RestartEveryWorker(const std::string& reason) {
  const int left = config().max_restarts - restart_;
  if (left <= 0 || StopSignal() != 0) {
    return Fail(reason + (left <= 0 ? "; no restart left (--max-restarts " +
                                          std::to_string(config().max_restarts) + ")"
                                    : ""));
  }
  if (node_ && link_) {
    // Every node starts every worker again: the coordinator tells each (in its next answer).
    if (!link_->restart_every_worker() &&
        (!link_->EndJob(reason, milliseconds(2000), true) || !link_->restart_every_worker())) {
      const std::string verdict = CoordinatorVerdict();
      return Fail(verdict.empty() ? reason +
                                        "; the coordinator did not answer when asked to "
                                        "start every worker again"
                                  : verdict);  // it ended the job for another reason first
    }
    // Node 0's lingers until every node heard it (or their time is up).
    const auto start = Clock::now();
    const long linger =
        2 * config().failover_threshold.count() + 3 * config().heartbeat_interval.count() + 2000;
    while (HostsCoordinator() && !slots_[0]->exited() && MillisSince(start) < linger) {
      Watch(milliseconds(20));
    }
  }
  Say(reason +
      "; stopping every process to start the whole job again, every worker with "
      "TORCHELASTIC_RESTART_COUNT=" +
      std::to_string(restart_ + 1) + " (restart " + std::to_string(restart_ + 1) + " of " +
      std::to_string(config().max_restarts) + (node_ ? ", on every node" : "") +
      ", as torchrun does: the program resumes from its own checkpoint)");
  StopAll();
  wants_restart_ = true;
  return 1;
}

int JobSupervisor::Run() {
  CatchStopSignals();
  if (Status s = CreateSecret(); !s.ok()) return Fail(s.message());
  slots_.reserve(1 + config().ps + config().workers + config().spare_ps);
  // The store loads LibTorch (most of a second): it starts beside the
  // coordinator, unless a per-node launch's coordinator must tell it.
  auto await_store = [&]() -> Status {
    if (store_ready_fd_ < 0) return Status::Ok();
    Status s = AwaitC10dStore();
    if (!s.ok() && config().master_port > 0) {
      return Unavailable(s.message() + ": choose another --master-port, or 0 for any free one");
    }
    return s;
  };
#ifdef EEN_NO_C10D_STORE
  constexpr bool kStoreBuilt = false;  // a sanitizer build (launcher/CMakeLists.txt)
#else
  constexpr bool kStoreBuilt = true;
#endif
  if (HostsCoordinator() && config().c10d_store && kStoreBuilt) {
    if (Status s = LaunchC10dStore(config().master_port); !s.ok()) return Fail(s.message());
    if (node_) {
      if (Status s = await_store(); !s.ok()) return Fail(s.message());
    }
  }
  if (HostsCoordinator()) {
    // A coordinator killed before it listened lost nothing: start it again.
    Status started = StartCoordinator(false);
    for (int tries = 1;
         !started.ok() && !slots_.empty() && slots_[0]->killed_by_signal() && tries <= 3; ++tries) {
      Say(started.message() + "; starting it again (" + std::to_string(tries) + " of 3)");
      started = StartCoordinator(false);
    }
    if (!started.ok()) return Fail(started.message());
    if (Status s = await_store(); !s.ok()) return Fail(s.message());
    Say("coordinator at " + plan_.coordinator_address() + "; " +
        (node_ ? "the job has " : "starting ") + std::to_string(config().ps) + " PS and " +
        std::to_string(config().workers) + " workers: " + plan_.command()[0]);
  } else {
    plan_.set_coordinator_address(node_->coordinator_address);
  }
  if (node_) {
    if (Status s = Rendezvous(); !s.ok()) {
      if (!link_ || link_->refused().empty()) return Fail(s.message());
      // Turned away: this node started nothing, and the job (if any) goes on.
      StopAll();
      Say("this node is not part of the job: " + s.message());
      return 1;
    }
    if (!HostsCoordinator()) {
      // As long as the roles wait for a silent coordinator (4x the
      // failover threshold; node 0's een-launch restarts a killed one within).
      remote_ =
          std::make_shared<RemoteCoordinator>(link_.get(),
                                              milliseconds(4 * config().failover_threshold.count() +
                                                           config().heartbeat_interval.count()),
                                              config().snapshot_every > 0);
      slots_.push_back(remote_);
      roles_.push_back({Role::kCoordinator, 0});
    }
  }
  if (!config().insecure) {
    Say("job secret in " + plan_.SecretPath() +
        " (a process added by hand needs "
        "EEN_JOB_SECRET_FILE=" +
        plan_.SecretPath() + "; eenctl finds it)");
  }
  if (StopSignal() == 0) {
    if (Status s = StartRoles(); !s.ok()) return Fail(s.message());
  }

  bool workers_done = false;
  Clock::time_point workers_done_at, failure_at, coordinator_done_at, consequences_since;
  std::string failure;
  // The failure is a PS's exit, a replacement's (one that came too late:
  // the job ended while it started) or a killed worker's; moot if the
  // coordinator ends the job well.
  bool failure_moot_if_finished = false;
  std::vector<bool> reported(slots_.size(), false);
  std::vector<bool> replacement(slots_.size(), false);
  int lost_workers = 0;
  auto SayFinished = [&] {
    const int here = LocalWorkers() + static_cast<int>(adopted_.size());
    Say("job finished: " + std::to_string(here - lost_workers) + " of " + std::to_string(here) +
        " workers" + (node_ ? " of this node" : "") + " succeeded" +
        (lost_workers ? " (the others were lost and the job went on without them)" : ""));
  };
  while (true) {
    Watch(milliseconds(50));
    // Workers of a lost node, which the coordinator gave this node to
    // replace (--max-restarts on another node): each joins the running job.
    for (int rank : link_&& failure.empty() && !workers_done ? link_->share().restart_workers
                                                             : std::vector<int>{}) {
      if (!adopted_.insert(rank).second) continue;
      Say("worker " + std::to_string(rank) +
          " was lost with its node; starting its replacement on this node (the coordinator's "
          "choice), which joins the running job");
      incarnations_[rank] = std::max(incarnations_[rank], 1);  // it replaces one
      const int local_rank = LocalWorkers() + static_cast<int>(adopted_.size()) - 1;
      if (Status s = StartWorker(slots_.size(), rank, local_rank); !s.ok()) {
        return Fail("starting a replacement for worker " + std::to_string(rank) + ": " +
                    s.message());
      }
      reported.push_back(false);
      replacement.push_back(true);
    }
    if (StopSignal() != 0) {
      const std::string sig = StopSignalName();
      const std::string why = stdin_closed_
                                  ? "its ssh connection to the launching een-launch closed (that "
                                    "een-launch was stopped, or its host or the link is gone)"
                                  : "its een-launch was interrupted by " + sig;
      Say((stdin_closed_ ? why : "interrupted by " + sig) + "; stopping every process");
      EndJobEverywhere(why);
      StopAll();
      Say("job interrupted; every process stopped");
      return 130;
    }
    if (store_ && store_->exited() && failure.empty() && !workers_done) {
      if (store_restarts_ >= 3)
        return Fail("the c10d store " + store_->ExitDescription() +
                    " a fourth time (see its output above)");
      ++store_restarts_;
      const std::string store = plan_.c10d_store();
      Say("the c10d store (pid " + std::to_string(store_->pid()) + ") " +
          store_->ExitDescription() + "; starting it again at " + store + " (restart " +
          std::to_string(store_restarts_) +
          " of 3): workers in the middle of init_process_group may have to start again");
      if (Status s = LaunchC10dStore(plan_.c10d_store_port()); !s.ok()) return Fail(s.message());
      if (Status s = AwaitC10dStore(); !s.ok()) return Fail(s.message());
      continue;
    }
    // The coordinator ended the job for a worker lost by its silence, which only a restart of
    // every worker replaces (a failure seen before, a PS or worker told of the end, only
    // followed from that).
    if (HostsCoordinator() && slots_[0]->exit_status() == kCoordinatorExitRestartEveryWorker) {
      return RestartEveryWorker(CoordinatorVerdict());
    }
    // Per-node launch: the coordinator ended the job for every node to do so.
    if (ToldToRestartEveryWorker()) return RestartEveryWorker(CoordinatorVerdict());
    if (failure.empty() && !workers_done && HostsCoordinator() && slots_[0]->killed_by_signal() &&
        !reported[0] && coordinator_restarts_ < 3) {
      ++coordinator_restarts_;
      Say("coordinator (pid " + std::to_string(slots_[0]->pid()) + ") " +
          slots_[0]->ExitDescription() + "; restarting it from its saved state (restart " +
          std::to_string(coordinator_restarts_) + " of 3)");
      if (Status s = StartCoordinator(true); !s.ok())
        return Fail("restarting the coordinator: " + s.message());
      continue;
    }
    if (failure.empty() && workers_done && slots_[0]->exited() && !slots_[0]->succeeded() &&
        !reported[0]) {
      // Every worker had finished: the training is done and nothing is lost
      // (the parameters are the workers'), the PS have nothing left to serve.
      reported[0] = true;
      Say("coordinator (pid " + std::to_string(slots_[0]->pid()) + ") " +
          slots_[0]->ExitDescription() +
          " after every worker had finished: nothing was lost; "
          "stopping the PS");
      StopAll();
      SayFinished();
      return 0;
    }
    if (failure.empty()) {
      // Those seen ended in this round, the ones that failed for a peer's loss last: a busy
      // machine may reap the cause and its consequences together.
      std::vector<size_t> ended;
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i]->exited() && !reported[i]) ended.push_back(i);
      }
      std::stable_partition(ended.begin(), ended.end(), [&](size_t i) {
        return !IsWorker(i) || !ReadsAsAPeersLoss(slots_[i]->last_line());
      });
      // Workers that failed only for a peer's loss: the peer that failed first may take a
      // moment longer to end (its teardown closed the connections), or be on another node
      // (whose een-launch tells the coordinator). Up to 2 s for that cause to show.
      const bool only_consequences =
          !ended.empty() && std::all_of(ended.begin(), ended.end(), [&](size_t i) {
            return IsWorker(i) && !slots_[i]->succeeded() &&
                   ReadsAsAPeersLoss(slots_[i]->last_line());
          });
      if (!only_consequences) {
        consequences_since = Clock::time_point{};
      } else if (CoordinatorVerdict().empty()) {
        if (consequences_since == Clock::time_point{}) consequences_since = Clock::now();
        if (MillisSince(consequences_since) < 2000) continue;
      }
      for (size_t i : ended) {
        const RoleProcess& c = *slots_[i];
        reported[i] = true;
        const bool is_worker = IsWorker(i);
        // A clean exit is never a failure by itself: a coordinator or PS
        // that ends early leaves workers that fail loudly on their own. A
        // worker's is told to the coordinator: one that never joined ends
        // the job, one that did leaves it like a finished one.
        if (c.succeeded()) {
          if (is_worker) TellCoordinatorWorkerExited(roles_[i].rank, c);
          continue;
        }
        std::string what =
            roles_[i].role == Role::kCoordinator && remote_
                ? "the coordinator at " + plan_.coordinator_address() + " " + c.ExitDescription()
                : c.label() + " (pid " + std::to_string(c.pid()) + ") " + c.ExitDescription();
        // A program that aborted (an uncaught exception: std::terminate
        // printed its what()) said why on its last line, as one that exited 1.
        const bool own_failure = !c.killed_by_signal() || c.term_signal() == SIGABRT;
        if (is_worker && own_failure && !c.last_line().empty()) {
          what += "; its last line: " + c.last_line();
        }
        const bool is_ps = roles_[i].role == Role::kPs || roles_[i].role == Role::kSpare;
        bool recoverable = config().replicas >= 2 || config().snapshot_every > 0;
        // Whether a replacement may start (a PS's also needs the job to be
        // recoverable; a worker's a coordinator still there).
        const bool ps_may_restart =
            is_ps && c.killed_by_signal() && ps_restarts_ < 3 && !workers_done;
        const bool worker_may_restart =
            is_worker && worker_restarts_ < config().max_restarts && !workers_done;
        // The coordinator hears it first: the process is lost at once and
        // its rank free for the replacement (before the start, any PS may
        // be replaced: nothing was lost).
        std::optional<bool> started;
        // A worker killed from outside may have finished training first
        // (then nothing is replaced); one that failed on its own keeps its
        // own last line as the verdict.
        const bool worker_killed = is_worker && !own_failure;
        // The coordinator finished the job well before this worker was
        // killed: it ends a job only when every worker has finished or was
        // declared lost, so the training lost nothing.
        if (worker_killed && slots_[0]->succeeded()) {
          Say(what +
              " after the coordinator had finished the job: the job lost nothing and goes on "
              "without a replacement (what the program did after Finish() was cut short)");
          continue;
        }
        // --ps 0 (the program moves its own gradients: gloo, nccl): no
        // worker can be replaced alone.
        if (is_worker && config().ps == 0 && config().max_restarts > 0 && !workers_done) {
          // (Per-node launch: another node's cause, told to the coordinator, goes first.)
          const std::string verdict = link_ ? CoordinatorVerdict() : "";
          return RestartEveryWorker(verdict.empty() ? what : verdict);
        }
        if (ps_may_restart || ((worker_may_restart || worker_killed) && !slots_[0]->exited())) {
          const auto gone = TellCoordinatorProcessGone(c, c.ExitDescription());
          if (gone && gone->restart_all) {
            // It may have ended because the coordinator had ended the job for another's loss.
            const std::string verdict = CoordinatorVerdict();
            return RestartEveryWorker(verdict.empty() ? what : verdict);
          }
          if (gone && gone->finished) {
            // It had finished training (Finish()): nothing of the job is
            // lost and nothing is replaced; its own work after that was cut.
            Say(what + (is_ps ? " after the job had finished training: nothing was lost, and no "
                                "replacement starts"
                              : " after it had finished training: the job lost nothing and goes "
                                "on without a replacement (what the program did after Finish() "
                                "was cut short)"));
            continue;
          }
          if (gone) started = gone->started;
          if (started == false) recoverable = true;
        }
        if (ps_may_restart && recoverable) {
          ++ps_restarts_;
          const std::string how =
              started == false        ? "; the job had not started: a replacement takes its rank"
              : config().spare_ps > 0 ? "; a spare takes over, and a new spare starts"
              : config().replicas >= 2
                  ? "; its backups take over, and a replacement starts to hold new backups"
                  : "; starting a replacement: the job rolls back to its last complete snapshot";
          Say(what + how + " (PS restart " + std::to_string(ps_restarts_) + " of 3)");
          // With spares, the coordinator gives the lost rank to a standby
          // (a second process for that rank would be refused): a new spare
          // starts. Before the start, the PS's own rank is free: its
          // replacement takes it.
          const bool spare_slot = roles_[i].role == Role::kSpare;
          const Status s = (config().spare_ps > 0 && (started != false || spare_slot))
                               ? StartSpare(i)
                               : StartPs(i, roles_[i].rank);
          if (!s.ok()) return Fail("restarting " + what + ": " + s.message());
          reported[i] = false;
          continue;
        }
        if (worker_may_restart && !slots_[0]->exited()) {
          ++worker_restarts_;
          const int rank = roles_[i].rank;
          Say(what + "; starting a replacement that joins the running job (worker restart " +
              std::to_string(worker_restarts_) + " of " + std::to_string(config().max_restarts) +
              ")");
          if (Status s = StartWorker(i, rank); !s.ok())
            return Fail("restarting " + what + ": " + s.message());
          reported[i] = false;
          replacement[i] = true;
          continue;
        }
        // (A node counts its own losses only; the coordinator, which sees
        // every node's, ends the job if too few workers are left.)
        if (is_worker && config().workers - (lost_workers + 1) >= config().MinWorkers()) {
          ++lost_workers;
          Say(what + "; the job goes on with " + std::to_string(config().workers - lost_workers) +
              " workers (--min-workers " + std::to_string(config().MinWorkers()) + ")");
          continue;
        }
        // Per-node launch: it ended because the job is starting again (said once, there).
        if (ToldToRestartEveryWorker()) return RestartEveryWorker(CoordinatorVerdict());
        Say(what);
        // The coordinator ended the job first (a bad model, a lost PS, ...):
        // this process only stopped because of it, and the verdict names the cause.
        // (A node but 0 asks it now: its last answer may predate the abort.
        // A verdict that comes later is a consequence, not the cause.)
        if (link_ && !HostsCoordinator()) link_->Refresh(milliseconds(500));
        const std::string verdict = CoordinatorVerdict();
        failure = verdict.empty() ? what : verdict;
        failure_at = Clock::now();
        // (A PS, a replacement, or a worker killed from outside while the
        // coordinator was ending the job: it may yet finish the job well.)
        failure_moot_if_finished = is_ps || replacement[i] || worker_killed;
        break;
      }
    }
    if (!failure.empty() && failure_moot_if_finished && slots_[0]->succeeded()) {
      // The coordinator ended the job well all the same (it ends a job that
      // a PS loss hurts): the PS went while or after it left, the
      // replacement came after the others had finished, or the worker was
      // killed after its last step while the coordinator was leaving.
      Say("the coordinator finished the job well after that: " +
          failure.substr(0, failure.find(';')) + " was no longer needed by it, nothing was lost");
      failure.clear();
    }
    if (!failure.empty()) {
      // Let the coordinator say which process and step, then stop everyone.
      const bool coordinator_gone = slots_[0]->exited();
      // One that has given its verdict ends within moments (a busy machine: a few seconds); one
      // that may yet end the job well first declares the process lost, which adaptive liveness
      // may allow up to 3x the threshold on a busy machine.
      const bool coordinator_ending =
          HostsCoordinator() && !coordinator_gone && !CoordinatorVerdict().empty();
      const auto threshold = config().failover_threshold.count();
      const auto patience = coordinator_ending         ? threshold + 10000
                            : failure_moot_if_finished ? 3 * threshold + 5000
                                                       : threshold + 1500;
      // (--ps 0: nothing else knows more than this process's own end.)
      // Per-node launch: this node's loss may come from the job's end for a restart.
      if (ToldToRestartEveryWorker()) return RestartEveryWorker(CoordinatorVerdict());
      if (coordinator_gone || config().ps == 0 || MillisSince(failure_at) > patience) {
        // A node but 0 whose coordinator fell silent: its roles stopped
        // because of that (they wait for it as long), and that is the cause.
        if (remote_ && remote_->silent()) return Fail(remote_->verdict());
        return Fail(failure);
      }
      continue;
    }
    // The coordinator ended the job well: every worker was done or declared
    // lost, and it told every PS still in the job to leave. A process still
    // running well after that (PS leave, and lost workers are told to stop,
    // within moments) was declared lost before (a stopped or cut-off
    // process): it is no part of the job any more, and een-launch does not
    // wait for it.
    if (slots_[0]->succeeded() && coordinator_done_at == Clock::time_point{}) {
      coordinator_done_at = Clock::now();
    }
    const bool stragglers_expired =
        slots_[0]->succeeded() &&
        MillisSince(coordinator_done_at) > config().failover_threshold.count() + 2000;
    if (!workers_done) {
      workers_done = true;
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (IsWorker(i)) workers_done &= slots_[i]->exited();
      }
      // A worker that finished (Finish()) may go on with its own work
      // (saving, evaluating): only those declared lost, and replacements
      // that never joined (they started too late), are not waited for.
      const auto never_joined = [&](size_t i) {
        return i < replacement.size() && replacement[i] && !Joined(*slots_[i]);
      };
      bool only_lost_left = !workers_done && stragglers_expired;
      for (size_t i = 0; only_lost_left && i < slots_.size(); ++i) {
        if (IsWorker(i)) {
          only_lost_left = slots_[i]->exited() || DeclaredLost(*slots_[i]) || never_joined(i);
        }
      }
      if (only_lost_left) {
        for (size_t i = 0; i < slots_.size(); ++i) {
          if (!IsWorker(i) || slots_[i]->exited()) continue;
          ++lost_workers;
          Say(slots_[i]->label() + " (pid " + std::to_string(slots_[i]->pid()) +
              (never_joined(i) ? "), a replacement, had not joined when the coordinator finished "
                                 "the job (it started too late to take part); stopping it"
                               : ") is still running though the coordinator declared it lost and "
                                 "finished the job without it; stopping it"));
        }
        workers_done = true;
      }
      if (workers_done) workers_done_at = Clock::now();
    }
    if (workers_done) {
      bool all = true;
      for (const auto& c : slots_) all &= c->exited();
      if (!all && stragglers_expired) {
        for (size_t i = 0; i < slots_.size(); ++i) {
          if (roles_[i].role != Role::kPs || slots_[i]->exited()) continue;
          Say(slots_[i]->label() + " (pid " + std::to_string(slots_[i]->pid()) +
              ") is still running though the coordinator declared it lost and finished the job "
              "without it; stopping it");
        }
        all = true;
      }
      if (all) {
        StopAll();
        SayFinished();
        return 0;
      }
      if (MillisSince(workers_done_at) > 4 * config().failover_threshold.count() + 5000) {
        std::string running;
        for (const auto& c : slots_) {
          if (!c->exited())
            running += (running.empty() ? "" : ", ") + c->label() + " (pid " +
                       std::to_string(c->pid()) + ")";
        }
        return Fail("every worker finished, but " + running + " did not stop within " +
                    std::to_string(4 * config().failover_threshold.count() + 5000) + " ms");
      }
    }
  }
}

}  // namespace een
