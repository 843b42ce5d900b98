// ChildProcess: one role of a local job, started by een-launch.
//
// Start() forks and execs `argv` with extra environment variables, in a
// process group of its own (so signals reach its children too) and with
// PR_SET_PDEATHSIG, so it dies if the launcher dies. Its stdout and stderr go
// to one pipe that the launcher reads and prefixes with the child's label,
// line by line (a partial line waits for its end, or for the child's exit).
// With UseTerminal() they go to a pseudo-terminal instead (raw mode: no
// echo, no CR added), so the C library and iostreams line-buffer a user's
// program's output as on a terminal: each line shows up when it is written,
// not when a block buffer fills or never if the process is killed.
// Thread safety: single-threaded (the launcher's loop).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace een {

class ChildProcess {
 public:
  ChildProcess(std::string label, std::vector<std::string> argv,
               std::map<std::string, std::string> env, std::vector<int> keep_fds = {})
      : label_(std::move(label)),
        argv_(std::move(argv)),
        env_(std::move(env)),
        keep_fds_(std::move(keep_fds)) {}

  // Before Start(): a pseudo-terminal instead of a pipe (also sets TERM=dumb,
  // so libraries that colour a terminal's output do not).
  void UseTerminal() { terminal_ = true; }
  Status Start();
  // Reads what the child wrote; complete lines go to `out` with the label.
  // Returns false at end of output.
  bool Drain(bool flush_partial = false);
  void Signal(int signo) const;  // to the whole process group
  // Records the exit; true when `pid` was this child.
  bool Reap(pid_t pid, int wait_status);

  const std::string& label() const { return label_; }
  pid_t pid() const { return pid_; }
  int output_fd() const { return out_fd_; }
  bool running() const { return pid_ > 0 && !exited_; }
  bool exited() const { return exited_; }
  bool succeeded() const { return exited_ && exit_code_ == 0 && term_signal_ == 0; }
  bool killed_by_signal() const { return exited_ && term_signal_ != 0; }
  int term_signal() const { return term_signal_; }
  // "exited with status 3", "was killed by SIGKILL"
  std::string ExitDescription() const;
  // The last non-empty line it printed (often the error that ended it).
  const std::string& last_line() const { return last_line_; }

 private:
  std::string label_;
  std::vector<std::string> argv_;
  std::map<std::string, std::string> env_;
  std::vector<int> keep_fds_;
  bool terminal_ = false;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool exited_ = false;
  int exit_code_ = 0;
  int term_signal_ = 0;
  std::string partial_;
  std::string last_line_;
};

}  // namespace een
