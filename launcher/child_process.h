// ChildProcess: one process LocalHost forked (the RoleProcess of this host).
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
#include "launcher/process_host.h"

namespace een {

class ChildProcess : public RoleProcess {
 public:
  // spec.terminal: a pseudo-terminal instead of a pipe (also sets TERM=dumb,
  // so libraries that colour a terminal's output do not).
  explicit ChildProcess(ProcessSpec spec) : spec_(std::move(spec)) {}

  Status Start();
  // Reads what the child wrote; complete lines go to `out` with the label.
  // Returns false at end of output.
  bool Drain(bool flush_partial = false);
  // Records the exit; true when `pid` was this child.
  bool Reap(pid_t pid, int wait_status);
  int output_fd() const { return out_fd_; }

  void Signal(int signo) const override;  // to the whole process group
  void CloseInput() override;
  bool saw_watched() const override { return saw_watched_; }
  const std::string& label() const override { return spec_.label; }
  pid_t pid() const override { return pid_; }
  bool running() const override { return pid_ > 0 && !exited_; }
  bool exited() const override { return exited_; }
  bool succeeded() const override { return exited_ && exit_code_ == 0 && term_signal_ == 0; }
  bool killed_by_signal() const override { return exited_ && term_signal_ != 0; }
  int term_signal() const override { return term_signal_; }
  int exit_status() const override { return exited_ ? exit_code_ : 0; }
  std::string ExitDescription() const override;
  const std::string& last_line() const override { return last_line_; }

 private:
  ProcessSpec spec_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;  // our end of its stdin pipe (ProcessSpec::input_pipe)
  bool saw_watched_ = false;
  bool exited_ = false;
  int exit_code_ = 0;
  int term_signal_ = 0;
  std::string partial_;
  std::string last_line_;
};

}  // namespace een
