#include "launcher/job_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/logging.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "launcher/say.h"

namespace een {
namespace {

std::atomic<int> g_signal{0};
void OnSignal(int signo) { g_signal = signo; }

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

long MillisSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
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
  const std::string secret = transport::NewSecret();
  if (secret.empty()) return Internal("cannot draw a random job secret (libsodium failed)");
  EEN_RETURN_IF_ERROR(transport::WriteSecretFile(plan_.SecretPath(), secret));
  transport::SetCredentials({secret, "launcher"});
  return Status::Ok();
}

Status JobSupervisor::StartInto(size_t slot, ProcessHost* host, ProcessSpec spec) {
  if (std::find(hosts_.begin(), hosts_.end(), host) == hosts_.end()) hosts_.push_back(host);
  EEN_ASSIGN_OR_RETURN(auto process, host->Start(std::move(spec)));
  if (slot < slots_.size()) {
    slots_[slot] = std::move(process);
  } else {
    slots_.push_back(std::move(process));
  }
  return Status::Ok();
}

Status JobSupervisor::StartPs(size_t slot, int rank) {
  return StartInto(slot, place_("ps", rank), plan_.Ps(rank));
}

Status JobSupervisor::StartSpare(size_t slot) {
  const int n = spares_started_++;
  return StartInto(slot, place_("ps", config().ps + n), plan_.Spare(n));
}

Status JobSupervisor::StartWorker(size_t slot, int rank) {
  return StartInto(slot, place_("worker", rank), plan_.Worker(rank));
}

Status JobSupervisor::StartCoordinator(bool restore) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return Internal("pipe failed");
  Status s = StartInto(0, here_, plan_.Coordinator(restore, ready[1]));
  close(ready[1]);
  if (!s.ok()) {
    close(ready[0]);
    return s;
  }
  RoleProcess& coordinator = *slots_[0];
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
    here_->Watch(milliseconds(0));
    if (MillisSince(start) > 10000) break;
  }
  close(ready[0]);
  if (line.find('\n') == std::string::npos) {
    // Say how it ended, if it did (killed before it listened, say).
    for (int i = 0; i < 20 && !coordinator.exited(); ++i) here_->Watch(milliseconds(10));
    return Unavailable("the coordinator (pid " + std::to_string(coordinator.pid()) + ") " +
                       (coordinator.exited() ? coordinator.ExitDescription() : "gave no address") +
                       " before it started listening" +
                       (coordinator.killed_by_signal() ? "" : " (see its output above)"));
  }
  plan_.set_coordinator_address(line.substr(0, line.find('\n')));
  // For eenctl on this machine: which job secret goes with this address.
  std::ofstream(plan_.run_dir() + "/coordinator") << plan_.coordinator_address() << '\n';
  return Status::Ok();
}

Status JobSupervisor::StartRoles() {
  for (int r = 0; r < config().ps; ++r) EEN_RETURN_IF_ERROR(StartPs(slots_.size(), r));
  for (int r = 0; r < config().workers; ++r) EEN_RETURN_IF_ERROR(StartWorker(slots_.size(), r));
  for (int k = 0; k < config().spare_ps; ++k) EEN_RETURN_IF_ERROR(StartSpare(slots_.size()));
  return Status::Ok();
}

void JobSupervisor::Watch(milliseconds timeout) {
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

bool JobSupervisor::DeclaredLost(const RoleProcess& worker) const {
  std::ifstream in(plan_.LostPath());
  int rank;
  pid_t pid;
  while (in >> rank >> pid) {
    if (pid == worker.pid()) return true;
  }
  return false;
}

std::string JobSupervisor::CoordinatorVerdict() const {
  std::ifstream in(plan_.VerdictPath());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
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
  wire::Outgoing b;
  auto gone = b.header().initProcessGone();
  gone.setPid(process.pid());
  gone.setWhat(what);
  if (!coordinator_->Send(b.Take()).ok()) return std::nullopt;
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
                                               h.getProcessGoneReply().getFinished()};
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
  wire::Outgoing b;
  auto exit = b.header().initWorkerExited();
  exit.setRank(rank);
  exit.setPid(worker.pid());
  exit.setStatus(worker.succeeded() ? 0 : 1);
  if (Status s = coordinator_->Send(b.Take()); !s.ok()) {
    Say("could not tell the coordinator that worker " + std::to_string(rank) +
        " exited: " + s.message());
  }
}

int JobSupervisor::Fail(const std::string& reason) {
  Say("job failed; stopping every process (the reason is the last line)");
  StopAll();
  Say("job failed: " + reason);
  return 1;
}

int JobSupervisor::Run() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (Status s = CreateSecret(); !s.ok()) return Fail(s.message());
  slots_.reserve(1 + config().ps + config().workers + config().spare_ps);
  // A coordinator killed before it listened lost nothing: start it again.
  Status started = StartCoordinator(false);
  for (int tries = 1;
       !started.ok() && !slots_.empty() && slots_[0]->killed_by_signal() && tries <= 3; ++tries) {
    Say(started.message() + "; starting it again (" + std::to_string(tries) + " of 3)");
    started = StartCoordinator(false);
  }
  if (!started.ok()) return Fail(started.message());
  Say("coordinator at " + plan_.coordinator_address() + "; starting " +
      std::to_string(config().ps) + " PS and " + std::to_string(config().workers) +
      " workers: " + plan_.command()[0]);
  if (!config().insecure) {
    Say("job secret in " + plan_.SecretPath() +
        " (a process added by hand needs "
        "EEN_JOB_SECRET_FILE=" +
        plan_.SecretPath() + "; eenctl finds it)");
  }
  if (Status s = StartRoles(); !s.ok()) return Fail(s.message());

  const size_t first_worker = 1 + config().ps;
  bool workers_done = false;
  Clock::time_point workers_done_at, failure_at, coordinator_done_at;
  std::string failure;
  // The failure is a PS's exit or a replacement's (one that came too late:
  // the job ended while it started); moot if the coordinator ends it well.
  bool failure_from_ps = false;
  std::vector<bool> reported(slots_.size(), false);
  std::vector<bool> replacement(slots_.size(), false);
  int lost_workers = 0;
  auto SayFinished = [&] {
    Say("job finished: " + std::to_string(config().workers - lost_workers) + " of " +
        std::to_string(config().workers) + " workers succeeded" +
        (lost_workers ? " (the others were lost and the job went on without them)" : ""));
  };
  while (true) {
    Watch(milliseconds(50));
    if (g_signal != 0) {
      const char* name = sigabbrev_np(g_signal);
      Say(std::string("interrupted by SIG") + (name ? name : "?") + "; stopping every process");
      StopAll();
      Say("job interrupted; every process stopped");
      return 130;
    }
    if (failure.empty() && !workers_done && slots_[0]->killed_by_signal() && !reported[0] &&
        coordinator_restarts_ < 3) {
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
      for (size_t i = 0; i < slots_.size(); ++i) {
        const RoleProcess& c = *slots_[i];
        if (!c.exited() || reported[i]) continue;
        reported[i] = true;
        const bool is_worker = i >= first_worker && i < first_worker + config().workers;
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
        if (ps_may_restart || ((worker_may_restart || worker_killed) && !slots_[0]->exited())) {
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
          const bool spare_slot = i >= first_worker + config().workers;
          const Status s = (config().spare_ps > 0 && (started != false || spare_slot))
                               ? StartSpare(i)
                               : StartPs(i, static_cast<int>(i) - 1);
          if (!s.ok()) return Fail("restarting " + what + ": " + s.message());
          reported[i] = false;
          continue;
        }
        if (worker_may_restart && !slots_[0]->exited()) {
          ++worker_restarts_;
          const int rank = static_cast<int>(i - first_worker);
          Say(what + "; starting a replacement that joins the running job (worker restart " +
              std::to_string(worker_restarts_) + " of " + std::to_string(config().max_restarts) +
              ")");
          if (Status s = StartWorker(i, rank); !s.ok())
            return Fail("restarting " + what + ": " + s.message());
          reported[i] = false;
          replacement[i] = true;
          continue;
        }
        if (is_worker && config().workers - (lost_workers + 1) >= config().MinWorkers()) {
          ++lost_workers;
          Say(what + "; the job goes on with " + std::to_string(config().workers - lost_workers) +
              " workers (--min-workers " + std::to_string(config().MinWorkers()) + ")");
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
    if (!failure.empty() && failure_from_ps && slots_[0]->succeeded()) {
      // The coordinator ended the job well all the same (it ends a job that
      // a PS loss hurts): the PS went while or after it left, or the
      // replacement came after the others had finished.
      Say("the coordinator finished the job well after that: " +
          failure.substr(0, failure.find(';')) + " was no longer needed by it, nothing was lost");
      failure.clear();
    }
    if (!failure.empty()) {
      // Let the coordinator say which process and step, then stop everyone.
      const bool coordinator_gone = slots_[0]->exited();
      if (coordinator_gone ||
          MillisSince(failure_at) > config().failover_threshold.count() + 1500) {
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
      for (size_t i = first_worker; i < first_worker + config().workers; ++i) {
        workers_done &= slots_[i]->exited();
      }
      // A worker that finished (Finish()) may go on with its own work
      // (saving, evaluating): only those declared lost are not waited for.
      bool only_lost_left = !workers_done && stragglers_expired;
      for (size_t i = first_worker; only_lost_left && i < first_worker + config().workers; ++i) {
        only_lost_left = slots_[i]->exited() || DeclaredLost(*slots_[i]);
      }
      if (only_lost_left) {
        for (size_t i = first_worker; i < first_worker + config().workers; ++i) {
          if (slots_[i]->exited()) continue;
          ++lost_workers;
          Say(slots_[i]->label() + " (pid " + std::to_string(slots_[i]->pid()) +
              ") is still running though the coordinator declared it lost and finished the job "
              "without it; stopping it");
        }
        workers_done = true;
      }
      if (workers_done) workers_done_at = Clock::now();
    }
    if (workers_done) {
      bool all = true;
      for (const auto& c : slots_) all &= c->exited();
      if (!all && stragglers_expired) {
        for (size_t i = 1; i < first_worker; ++i) {
          if (slots_[i]->exited()) continue;
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
