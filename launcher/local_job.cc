#include "launcher/local_job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/logging.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "launcher/leftovers.h"

namespace een {
namespace {

std::atomic<int> g_signal{0};
void OnSignal(int signo) { g_signal = signo; }

using Clock = std::chrono::steady_clock;

long MillisSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

void Say(const std::string& line) {
  std::fprintf(stdout, "[een-launch] %s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

std::map<std::string, std::string> LocalJob::RoleEnvironment(const std::string& role,
                                                             int rank) const {
  std::map<std::string, std::string> env = {
      {"EEN_COORDINATOR", coordinator_address_},
      {"EEN_ROLE", role},
      {"EEN_RANK", std::to_string(rank)},
      {"EEN_WORLD_SIZE", std::to_string(config_.workers)},
      {"EEN_NUM_PS", std::to_string(config_.ps)},
      {"EEN_HOST", config_.host},
      {"EEN_DATA_TRANSPORT", config_.transport},
      {"EEN_WIRE_DTYPE", config_.wire_dtype},
      {"EEN_RUN_DIR", run_dir_},
      {"EEN_FAILOVER_THRESHOLD_MS", std::to_string(config_.failover_threshold.count())},
      {"EEN_HEARTBEAT_MS", std::to_string(config_.heartbeat_interval.count())},
      {"EEN_STARTUP_TIMEOUT_MS", std::to_string(config_.startup_timeout.count())},
      {"EEN_STEP_TIMEOUT_MS", std::to_string(config_.step_timeout.count())},
  };
  env.merge(SecurityEnvironment());
  if (role == "ps" && (config_.snapshot_every > 0 || config_.resume)) {
    env["EEN_SNAPSHOT_DIR"] = config_.snapshot_dir;
    env["EEN_SNAPSHOT_EVERY"] = std::to_string(config_.snapshot_every);
    env["EEN_RESUME"] = config_.resume ? "1" : "0";
  }
  // Several workers share this machine: one intra-op thread each unless told.
  if (!std::getenv("OMP_NUM_THREADS")) {
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1L, cores / config_.workers));
  }
  return env;
}

std::map<std::string, std::string> LocalJob::SecurityEnvironment() const {
  if (config_.insecure) return {{"EEN_INSECURE", "1"}, {"EEN_JOB_SECRET_FILE", ""}};
  return {{"EEN_JOB_SECRET_FILE", SecretPath()}, {"EEN_INSECURE", ""}};
}

std::string LocalJob::SecretPath() const { return run_dir_ + "/secret"; }

Status LocalJob::CreateSecret() {
  if (run_dir_.empty()) {
    return Unavailable("cannot create the job's run folder in /tmp (full, or not writable?)");
  }
  if (config_.insecure) {
    Say("--insecure: no job secret; any process on this host can connect to this job and "
        "disturb it");
    transport::SetCredentials({"", "launcher"});
    return Status::Ok();
  }
  const std::string secret = transport::NewSecret();
  if (secret.empty()) return Internal("cannot draw a random job secret (libsodium failed)");
  EEN_RETURN_IF_ERROR(transport::WriteSecretFile(SecretPath(), secret));
  transport::SetCredentials({secret, "launcher"});
  return Status::Ok();
}

Status LocalJob::StartCoordinator(bool restore) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return Internal("pipe failed");
  std::vector<std::string> argv = {bin_dir_ + "/een-coordinator",
                                   "--ps",
                                   std::to_string(config_.ps),
                                   "--workers",
                                   std::to_string(config_.workers),
                                   "--min-workers",
                                   std::to_string(config_.MinWorkers()),
                                   "--snapshot-every",
                                   std::to_string(config_.snapshot_every),
                                   "--replicas",
                                   std::to_string(config_.replicas),
                                   "--max-restarts",
                                   std::to_string(config_.max_restarts),
                                   "--failover-threshold-ms",
                                   std::to_string(config_.failover_threshold.count()),
                                   "--heartbeat-ms",
                                   std::to_string(config_.heartbeat_interval.count()),
                                   "--liveness",
                                   config_.liveness,
                                   "--startup-timeout-ms",
                                   std::to_string(config_.startup_timeout.count()),
                                   "--progress-ms",
                                   std::to_string(config_.progress_interval.count()),
                                   "--max-chunk-numel",
                                   std::to_string(config_.sharding.max_chunk_numel),
                                   "--shards-per-ps",
                                   std::to_string(config_.sharding.shards_per_ps),
                                   "--listen",
                                   restore ? coordinator_address_ : "tcp://" + config_.host + ":0",
                                   "--state-dir",
                                   run_dir_ + "/coordinator-state",
                                   "--verdict-file",
                                   VerdictPath(),
                                   "--lost-file",
                                   run_dir_ + "/lost",
                                   "--ready-fd",
                                   std::to_string(ready[1])};
  if (config_.resume) argv.push_back("--resume");
  if (config_.snapshot_every > 0 || config_.resume) {
    argv.push_back("--snapshot-dir");
    argv.push_back(config_.snapshot_dir);
  }
  if (restore) argv.push_back("--restore");
  ChildProcess coordinator("coordinator", argv, SecurityEnvironment(), std::vector<int>{ready[1]});
  if (children_.empty()) {
    children_.push_back(std::move(coordinator));
  } else {
    children_[0] = std::move(coordinator);
  }
  Status s = children_[0].Start();
  close(ready[1]);
  if (!s.ok()) {
    close(ready[0]);
    return s;
  }
  // One line: the address it listens on. EOF first means it failed.
  std::string line;
  const auto start = Clock::now();
  while (line.find('\n') == std::string::npos) {
    pollfd p{ready[0], POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char buf[256];
      ssize_t n = read(ready[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, n);
    }
    children_[0].Drain();
    if (MillisSince(start) > 10000) break;
  }
  close(ready[0]);
  if (line.find('\n') == std::string::npos) {
    children_[0].Drain(true);
    // Say how it ended, if it did (killed before it listened, say).
    for (int i = 0; i < 20 && !children_[0].exited(); ++i) {
      ReapChildren();
      if (!children_[0].exited()) poll(nullptr, 0, 10);
    }
    return Unavailable(
        "the coordinator (pid " + std::to_string(children_[0].pid()) + ") " +
        (children_[0].exited() ? children_[0].ExitDescription() : "gave no address") +
        " before it started listening" +
        (children_[0].killed_by_signal() ? "" : " (see its output above)"));
  }
  coordinator_address_ = line.substr(0, line.find('\n'));
  // For eenctl on this machine: which job secret goes with this address.
  std::ofstream(run_dir_ + "/coordinator") << coordinator_address_ << '\n';
  return Status::Ok();
}

ChildProcess LocalJob::PsProcess(int rank) const {
  return ChildProcess("ps " + std::to_string(rank), {bin_dir_ + "/een-ps"},
                      RoleEnvironment("ps", rank));
}

ChildProcess LocalJob::WorkerProcess(int rank) const {
  // The user's program: on a pseudo-terminal, so its lines show up as written.
  ChildProcess worker("worker " + std::to_string(rank), command_, RoleEnvironment("worker", rank));
  worker.UseTerminal();
  return worker;
}

ChildProcess LocalJob::SpareProcess() {
  auto env = RoleEnvironment("ps", config_.ps + spares_started_);  // a placeholder rank
  env["EEN_SPARE"] = "1";
  return ChildProcess("spare " + std::to_string(spares_started_++), {bin_dir_ + "/een-ps"}, env);
}

Status LocalJob::StartRoles() {
  for (int r = 0; r < config_.ps; ++r) {
    children_.push_back(PsProcess(r));
    EEN_RETURN_IF_ERROR(children_.back().Start());
  }
  for (int r = 0; r < config_.workers; ++r) {
    children_.push_back(WorkerProcess(r));
    EEN_RETURN_IF_ERROR(children_.back().Start());
  }
  for (int k = 0; k < config_.spare_ps; ++k) {
    children_.push_back(SpareProcess());
    EEN_RETURN_IF_ERROR(children_.back().Start());
  }
  return Status::Ok();
}

void LocalJob::PumpOutput(int timeout_ms) {
  std::vector<pollfd> fds;
  for (const ChildProcess& c : children_) {
    if (c.output_fd() >= 0) fds.push_back({c.output_fd(), POLLIN, 0});
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(timeout_ms));  // nothing to read: pace the loop
  } else {
    poll(fds.data(), fds.size(), timeout_ms);
  }
  for (ChildProcess& c : children_) c.Drain();
}

void LocalJob::ReapChildren() {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (ChildProcess& c : children_) {
      if (c.Reap(pid, status)) c.Drain(true);
    }
  }
}

void LocalJob::StopAll() {
  for (ChildProcess& c : children_) {
    if (c.running()) c.Signal(SIGTERM);
  }
  const auto start = Clock::now();
  while (MillisSince(start) < 3000) {
    ReapChildren();
    bool any = false;
    for (const ChildProcess& c : children_) any |= c.running();
    if (!any) break;
    PumpOutput(20);
  }
  for (ChildProcess& c : children_) {
    if (c.running()) {
      Say(c.label() + " did not stop on SIGTERM; sending SIGKILL");
      c.Signal(SIGKILL);
    }
  }
  for (ChildProcess& c : children_) {
    if (c.running()) {
      int status;
      waitpid(c.pid(), &status, 0);
      c.Reap(c.pid(), status);
    }
    c.Signal(SIGKILL);  // anything a role left behind in its group
    c.Drain(true);
  }
  if (!run_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(run_dir_, ec);
  }
}

std::string LocalJob::VerdictPath() const { return run_dir_ + "/verdict"; }

bool LocalJob::DeclaredLost(const ChildProcess& worker) const {
  std::ifstream in(run_dir_ + "/lost");
  int rank;
  pid_t pid;
  while (in >> rank >> pid) {
    if (pid == worker.pid()) return true;
  }
  return false;
}

std::string LocalJob::CoordinatorVerdict() const {
  std::ifstream in(VerdictPath());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Status LocalJob::ConnectToCoordinator() {
  if (coordinator_) return Status::Ok();
  EEN_ASSIGN_OR_RETURN(auto device, transport::DeviceFor(coordinator_address_));
  EEN_ASSIGN_OR_RETURN(coordinator_, device->Connect(coordinator_address_));
  return Status::Ok();
}

std::optional<LocalJob::GoneReply> LocalJob::TellCoordinatorProcessGone(const ChildProcess& process,
                                                                        const std::string& what) {
  if (!ConnectToCoordinator().ok()) return std::nullopt;
  capnp::MallocMessageBuilder b;
  auto gone = b.initRoot<wire::Header>().initProcessGone();
  gone.setPid(process.pid());
  gone.setWhat(what);
  if (!coordinator_->Send(transport::Message{{wire::Encode(b)}}).ok()) return std::nullopt;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    PumpOutput(0);
    auto reply = coordinator_->Receive(std::chrono::milliseconds(50));
    if (!reply.ok()) continue;
    std::optional<GoneReply> answer;
    Ignored(wire::Visit(*reply,
                        [&](wire::Header::Reader h) -> Status {
                          if (h.isProcessGoneReply()) {
                            answer = GoneReply{h.getProcessGoneReply().getJobStarted(),
                                               h.getProcessGoneReply().getFinished()};
                          }
                          return Status::Ok();
                        }),
            "reading the coordinator's answer about a gone process");
    if (answer) return answer;
  }
  return std::nullopt;
}

void LocalJob::TellCoordinatorWorkerExited(int rank, const ChildProcess& worker) {
  if (!ConnectToCoordinator().ok()) return;
  capnp::MallocMessageBuilder b;
  auto exit = b.initRoot<wire::Header>().initWorkerExited();
  exit.setRank(rank);
  exit.setPid(worker.pid());
  exit.setStatus(worker.succeeded() ? 0 : 1);
  if (Status s = coordinator_->Send(transport::Message{{wire::Encode(b)}}); !s.ok()) {
    Say("could not tell the coordinator that worker " + std::to_string(rank) +
        " exited: " + s.message());
  }
}

int LocalJob::Fail(const std::string& reason) {
  Say("job failed; stopping every process (the reason is the last line)");
  StopAll();
  Say("job failed: " + reason);
  return 1;
}

int LocalJob::Run() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  RemoveLeftoversOfDeadJobs();  // of this user's jobs killed before they could clean up
  char tmpl[] = "/tmp/een-job-XXXXXX";
  if (mkdtemp(tmpl)) run_dir_ = tmpl;
  if (!run_dir_.empty()) MarkRunFolder(run_dir_);
  if (Status s = CreateSecret(); !s.ok()) return Fail(s.message());
  children_.reserve(1 + config_.ps + config_.workers + config_.spare_ps);
  // A coordinator killed before it listened lost nothing: start it again.
  Status started = StartCoordinator(false);
  for (int tries = 1; !started.ok() && children_[0].killed_by_signal() && tries <= 3; ++tries) {
    Say(started.message() + "; starting it again (" + std::to_string(tries) + " of 3)");
    started = StartCoordinator(false);
  }
  if (!started.ok()) return Fail(started.message());
  Say("coordinator at " + coordinator_address_ + "; starting " + std::to_string(config_.ps) +
      " PS and " + std::to_string(config_.workers) + " workers: " + command_[0]);
  if (!config_.insecure) {
    Say("job secret in " + SecretPath() +
        " (a process added by hand needs "
        "EEN_JOB_SECRET_FILE=" +
        SecretPath() + "; eenctl finds it)");
  }
  if (Status s = StartRoles(); !s.ok()) return Fail(s.message());

  const size_t first_worker = 1 + config_.ps;
  bool workers_done = false;
  Clock::time_point workers_done_at, failure_at, coordinator_done_at;
  std::string failure;
  // The failure is a PS's exit or a replacement's (one that came too late:
  // the job ended while it started); moot if the coordinator ends it well.
  bool failure_from_ps = false;
  std::vector<bool> reported(children_.size(), false);
  std::vector<bool> replacement(children_.size(), false);
  int lost_workers = 0;
  auto SayFinished = [&] {
    Say("job finished: " + std::to_string(config_.workers - lost_workers) + " of " +
        std::to_string(config_.workers) + " workers succeeded" +
        (lost_workers ? " (the others were lost and the job went on without them)" : ""));
  };
  while (true) {
    PumpOutput(50);
    ReapChildren();
    if (g_signal != 0) {
      const char* name = sigabbrev_np(g_signal);
      Say(std::string("interrupted by SIG") + (name ? name : "?") + "; stopping every process");
      StopAll();
      Say("job interrupted; every process stopped");
      return 130;
    }
    if (failure.empty() && !workers_done && children_[0].killed_by_signal() && !reported[0] &&
        coordinator_restarts_ < 3) {
      ++coordinator_restarts_;
      Say("coordinator (pid " + std::to_string(children_[0].pid()) + ") " +
          children_[0].ExitDescription() + "; restarting it from its saved state (restart " +
          std::to_string(coordinator_restarts_) + " of 3)");
      if (Status s = StartCoordinator(true); !s.ok())
        return Fail("restarting the coordinator: " + s.message());
      continue;
    }
    if (failure.empty() && workers_done && children_[0].exited() && !children_[0].succeeded() &&
        !reported[0]) {
      // Every worker had finished: the training is done and nothing is lost
      // (the parameters are the workers'), the PS have nothing left to serve.
      reported[0] = true;
      Say("coordinator (pid " + std::to_string(children_[0].pid()) + ") " +
          children_[0].ExitDescription() +
          " after every worker had finished: nothing was lost; "
          "stopping the PS");
      StopAll();
      SayFinished();
      return 0;
    }
    if (failure.empty()) {
      for (size_t i = 0; i < children_.size(); ++i) {
        const ChildProcess& c = children_[i];
        if (!c.exited() || reported[i]) continue;
        reported[i] = true;
        const bool is_worker = i >= first_worker && i < first_worker + config_.workers;
        // A clean exit is never a failure by itself: a coordinator or PS
        // that ends early leaves workers that fail loudly on their own. A
        // worker's is told to the coordinator: one that never joined ends
        // the job, one that did leaves it like a finished one.
        if (c.succeeded()) {
          if (is_worker) TellCoordinatorWorkerExited(static_cast<int>(i - first_worker), c);
          continue;
        }
        std::string what =
            c.label() + " (pid " + std::to_string(c.pid()) + ") " + c.ExitDescription();
        // A program that aborted (an uncaught exception: std::terminate
        // printed its what()) said why on its last line, as one that exited 1.
        const bool own_failure = !c.killed_by_signal() || c.term_signal() == SIGABRT;
        if (is_worker && own_failure && !c.last_line().empty()) {
          what += "; its last line: " + c.last_line();
        }
        const bool is_ps = i >= 1 && !is_worker;  // a PS or a spare
        bool recoverable = config_.replicas >= 2 || config_.snapshot_every > 0;
        // Whether a replacement may start (a PS's also needs the job to be
        // recoverable; a worker's a coordinator still there).
        const bool ps_may_restart =
            is_ps && c.killed_by_signal() && ps_restarts_ < 3 && !workers_done;
        const bool worker_may_restart =
            is_worker && worker_restarts_ < config_.max_restarts && !workers_done;
        // The coordinator hears it first: the process is lost at once and
        // its rank free for the replacement (before the start, any PS may
        // be replaced: nothing was lost).
        std::optional<bool> started;
        // A worker killed from outside may have finished training first
        // (then nothing is replaced); one that failed on its own keeps its
        // own last line as the verdict.
        const bool worker_killed = is_worker && !own_failure;
        if (ps_may_restart || ((worker_may_restart || worker_killed) && !children_[0].exited())) {
          const auto gone = TellCoordinatorProcessGone(c, c.ExitDescription());
          if (gone && gone->finished) {
            // It had finished training (Finish()): nothing of the job is
            // lost and nothing is replaced; its own work after that was cut.
            Say(what +
                " after it had finished training: the job lost nothing and goes on "
                "without a replacement (what the program did after Finish() was cut short)");
            continue;
          }
          if (gone) started = gone->started;
          if (started == false) recoverable = true;
        }
        if (ps_may_restart && recoverable) {
          ++ps_restarts_;
          const std::string how =
              started == false       ? "; the job had not started: a replacement takes its rank"
              : config_.spare_ps > 0 ? "; a spare takes over, and a new spare starts"
              : config_.replicas >= 2
                  ? "; its backups take over, and a replacement starts to hold new backups"
                  : "; starting a replacement: the job rolls back to its last complete snapshot";
          Say(what + how + " (PS restart " + std::to_string(ps_restarts_) + " of 3)");
          // With spares, the coordinator gives the lost rank to a standby
          // (a second process for that rank would be refused): a new spare
          // starts. Before the start, the PS's own rank is free: its
          // replacement takes it.
          const bool spare_slot = i >= first_worker + config_.workers;
          children_[i] = (config_.spare_ps > 0 && (started != false || spare_slot))
                             ? SpareProcess()
                             : PsProcess(static_cast<int>(i) - 1);
          if (Status s = children_[i].Start(); !s.ok())
            return Fail("restarting " + what + ": " + s.message());
          reported[i] = false;
          continue;
        }
        if (worker_may_restart && !children_[0].exited()) {
          ++worker_restarts_;
          const int rank = static_cast<int>(i - first_worker);
          Say(what + "; starting a replacement that joins the running job (worker restart " +
              std::to_string(worker_restarts_) + " of " + std::to_string(config_.max_restarts) +
              ")");
          children_[i] = WorkerProcess(rank);
          if (Status s = children_[i].Start(); !s.ok())
            return Fail("restarting " + what + ": " + s.message());
          reported[i] = false;
          replacement[i] = true;
          continue;
        }
        if (is_worker && config_.workers - (lost_workers + 1) >= config_.MinWorkers()) {
          ++lost_workers;
          Say(what + "; the job goes on with " + std::to_string(config_.workers - lost_workers) +
              " workers (--min-workers " + std::to_string(config_.MinWorkers()) + ")");
          continue;
        }
        Say(what);
        // The coordinator ended the job first (a bad model, a lost PS, ...):
        // this process only stopped because of it, and the verdict names the cause.
        const std::string verdict = CoordinatorVerdict();
        failure = verdict.empty() ? what : verdict;
        failure_at = Clock::now();
        failure_from_ps = is_ps || replacement[i];
        break;
      }
    }
    if (!failure.empty() && failure_from_ps && children_[0].succeeded()) {
      // The coordinator ended the job well all the same (it ends a job that
      // a PS loss hurts): the PS went while or after it left, or the
      // replacement came after the others had finished.
      Say("the coordinator finished the job well after that: " +
          failure.substr(0, failure.find(';')) + " was no longer needed by it, nothing was lost");
      failure.clear();
    }
    if (!failure.empty()) {
      // Let the coordinator say which process and step, then stop everyone.
      const bool coordinator_gone = children_[0].exited();
      if (coordinator_gone || MillisSince(failure_at) > config_.failover_threshold.count() + 1500) {
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
    if (children_[0].succeeded() && coordinator_done_at == Clock::time_point{}) {
      coordinator_done_at = Clock::now();
    }
    const bool stragglers_expired =
        children_[0].succeeded() &&
        MillisSince(coordinator_done_at) > config_.failover_threshold.count() + 2000;
    if (!workers_done) {
      workers_done = true;
      for (size_t i = first_worker; i < first_worker + config_.workers; ++i) {
        workers_done &= children_[i].exited();
      }
      // A worker that finished (Finish()) may go on with its own work
      // (saving, evaluating): only those declared lost are not waited for.
      bool only_lost_left = !workers_done && stragglers_expired;
      for (size_t i = first_worker; only_lost_left && i < first_worker + config_.workers; ++i) {
        only_lost_left = children_[i].exited() || DeclaredLost(children_[i]);
      }
      if (only_lost_left) {
        for (size_t i = first_worker; i < first_worker + config_.workers; ++i) {
          if (children_[i].exited()) continue;
          ++lost_workers;
          Say(children_[i].label() + " (pid " + std::to_string(children_[i].pid()) +
              ") is still running though the coordinator declared it lost and finished the job "
              "without it; stopping it");
        }
        workers_done = true;
      }
      if (workers_done) workers_done_at = Clock::now();
    }
    if (workers_done) {
      bool all = true;
      for (const ChildProcess& c : children_) all &= c.exited();
      if (!all && stragglers_expired) {
        for (size_t i = 1; i < first_worker; ++i) {
          if (children_[i].exited()) continue;
          Say(children_[i].label() + " (pid " + std::to_string(children_[i].pid()) +
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
      if (MillisSince(workers_done_at) > 4 * config_.failover_threshold.count() + 5000) {
        std::string running;
        for (const ChildProcess& c : children_) {
          if (!c.exited())
            running += (running.empty() ? "" : ", ") + c.label() + " (pid " +
                       std::to_string(c.pid()) + ")";
        }
        return Fail("every worker finished, but " + running + " did not stop within " +
                    std::to_string(4 * config_.failover_threshold.count() + 5000) + " ms");
      }
    }
  }
}

}  // namespace een
