// The launch backends' seam: what een-launch starts (ProcessSpec), where it
// starts it (ProcessHost: one host's way of starting and watching processes)
// and what it sees of a started process (RoleProcess).
//
// The supervision of a job (launcher/job_supervisor.h: which roles, restarts,
// spares, verdicts) meets processes only through these three, so a backend
// that starts roles elsewhere (over ssh, through Slurm's srun, a per-node
// launcher) is a new ProcessHost, not a second supervisor. LocalHost
// (launcher/local_host.h) is the one that forks; a remote backend starts its
// local agent (ssh, srun) through it, so one host reaps every child.
// Thread safety: single-threaded (the launcher's loop).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace een {

// A role to start: what the job needs, not how it is started.
struct ProcessSpec {
  std::string label;                       // "ps 1", "worker 3": prefixes its output lines
  std::vector<std::string> argv;           // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  // on top of the launcher's own environment
  std::vector<int> keep_fds;               // descriptors it inherits (on the launcher's host)
  bool terminal = false;                   // a pseudo-terminal: its lines show up as written
  // Its stdin: a pipe that gets `input` first and stays open until the
  // process is stopped or CloseInput() (else /dev/null). An agent on another
  // host (ssh) reads its job secret there and sees the launcher go at EOF.
  bool input_pipe = false;
  std::string input;
  // Its lines already carry labels ("[ps 1] ..."): this one joins them
  // ("[host1 ps 1] ...") instead of adding its own in front.
  bool nested_labels = false;
  // A text its output is watched for (RoleProcess::saw_watched()).
  std::string watch_for;
};

// A started process, as its host sees it. Its state changes only in its
// host's Watch() or StopAll().
class RoleProcess {
 public:
  virtual ~RoleProcess() = default;
  virtual const std::string& label() const = 0;
  // The pid the role registers with (on its own host).
  virtual pid_t pid() const = 0;
  virtual bool running() const = 0;
  virtual bool exited() const = 0;
  virtual bool succeeded() const = 0;  // exited with status 0
  virtual bool killed_by_signal() const = 0;
  virtual int term_signal() const = 0;
  // Its exit status (0 while it runs, or when a signal ended it).
  virtual int exit_status() const { return 0; }
  // "exited with status 3", "was killed by SIGKILL", "is still running"
  virtual std::string ExitDescription() const = 0;
  // The last non-empty line it printed (often the error that ended it).
  virtual const std::string& last_line() const = 0;
  // To the process and whatever it started (its process group).
  virtual void Signal(int signo) const = 0;
  // Closes its stdin pipe (ProcessSpec::input_pipe), if it has one.
  virtual void CloseInput() {}
  // Whether a line it printed held ProcessSpec::watch_for.
  virtual bool saw_watched() const { return false; }
};

class ProcessHost {
 public:
  virtual ~ProcessHost() = default;
  // Starts `spec` here; the host keeps watching it until StopAll().
  virtual Result<std::shared_ptr<RoleProcess>> Start(ProcessSpec spec) = 0;
  // Waits up to `timeout` for output, forwards every complete line to
  // stdout with its process's label, and records the processes that ended.
  virtual void Watch(std::chrono::milliseconds timeout) = 0;
  // SIGTERM to every running process, SIGKILL to those still running after
  // `grace` and to whatever each left in its group; returns once every
  // process has ended and its output is forwarded.
  virtual void StopAll(std::chrono::milliseconds grace) = 0;
};

}  // namespace een
