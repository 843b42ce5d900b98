#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/transport/registry.h"
#include "launcher/say.h"

namespace een {

namespace {

// fds[0]: the launcher's end (a pty master), fds[1]: the child's (its slave, raw).
Status OpenTerminal(int fds[2]) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return Internal(std::string("posix_openpt: ") + std::strerror(errno));
  const char* name = grantpt(master) == 0 && unlockpt(master) == 0 ? ptsname(master) : nullptr;
  const int slave = name ? open(name, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
  if (slave < 0) {
    const std::string why = std::strerror(errno);
    close(master);
    return Internal("opening a pseudo-terminal: " + why);
  }
  termios raw{};
  if (tcgetattr(slave, &raw) == 0) {
    cfmakeraw(&raw);  // no echo, no line editing, "\n" stays "\n"
    tcsetattr(slave, TCSANOW, &raw);
  }
  fds[0] = master;
  fds[1] = slave;
  return Status::Ok();
}

}  // namespace

Status ChildProcess::Start() {
  int fds[2];
  bool terminal = spec_.terminal;
  if (terminal) {
    if (Status s = OpenTerminal(fds); !s.ok()) {
      // A container or chroot without /dev/pts: a pipe carries the output
      // as well; only programs that buffer when not on a terminal print later.
      static bool warned = false;
      if (!std::exchange(warned, true)) {
        Say("no pseudo-terminal for the processes' output (" + s.message() +
            "): reading it through pipes instead, so a program's lines may come in blocks "
            "(mount devpts on /dev/pts, or flush stdout in the program)");
      }
      terminal = false;
    }
  }
  if (terminal) {
  } else if (pipe2(fds, O_CLOEXEC) != 0) {
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  int input[2] = {-1, -1};
  if (spec_.input_pipe && pipe2(input, O_CLOEXEC) != 0) {
    close(fds[0]);
    close(fds[1]);
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    if (spec_.input_pipe) {
      close(input[0]);
      close(input[1]);
    }
    return ResourceExhausted(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the launcher died before prctl took effect
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (spec_.input_pipe) {
      dup2(input[0], STDIN_FILENO);
    } else if (int devnull = open("/dev/null", O_RDONLY); devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
    }
    for (int fd : spec_.keep_fds) fcntl(fd, F_SETFD, 0);  // inherited on purpose
    for (const auto& [k, v] : spec_.env) setenv(k.c_str(), v.c_str(), 1);
    if (spec_.terminal) {
      setenv("TERM", "dumb", 1);
      unsetenv("COLORTERM");
    }
    std::vector<char*> args;
    for (const std::string& a : spec_.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "een-launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent: no race with Signal()
  close(fds[1]);
  if (spec_.input_pipe) {
    close(input[0]);
    in_fd_ = input[1];
    // Small (a secret): fits the pipe's buffer, so this never blocks.
    if (write(in_fd_, spec_.input.data(), spec_.input.size()) !=
        static_cast<ssize_t>(spec_.input.size())) {
      CloseInput();
    }
  }
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  pid_ = pid;
  out_fd_ = fds[0];
  return Status::Ok();
}

void ChildProcess::CloseInput() {
  if (in_fd_ >= 0) close(in_fd_);
  in_fd_ = -1;
}

bool ChildProcess::Drain(bool flush_partial) {
  if (out_fd_ < 0) return false;
  char buf[65536];
  bool open = true;
  while (true) {
    ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n > 0) {
      partial_.append(buf, n);
      continue;
    }
    // A pty master reads EIO once every slave descriptor is closed: the end.
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) open = false;
    break;  // EAGAIN: nothing more now
  }
  size_t start = 0, nl;
  std::string out;
  auto take = [&](const std::string& line) {  // without its "\n"
    if (spec_.nested_labels && !line.empty() && line[0] == '[') {
      out += "[" + spec_.label + " " + line.substr(1) + "\n";
    } else {
      out += "[" + spec_.label + "] " + line + "\n";
    }
    if (line.find_first_not_of(" \t\r") != std::string::npos) last_line_ = line;
    if (!spec_.watch_for.empty() && line.find(spec_.watch_for) != std::string::npos) {
      saw_watched_ = true;
    }
  };
  while ((nl = partial_.find('\n', start)) != std::string::npos) {
    take(partial_.substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
  if ((!open || flush_partial) && !partial_.empty()) {
    take(partial_);
    partial_.clear();
  }
  if (!out.empty()) {
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  if (!open) {
    close(out_fd_);
    out_fd_ = -1;
  }
  return open;
}

void ChildProcess::Signal(int signo) const {
  if (pid_ > 0) kill(-pid_, signo);  // the whole group: the role and anything it started
}

bool ChildProcess::Reap(pid_t pid, int wait_status) {
  if (pid != pid_) return false;
  exited_ = true;
  CloseInput();
  // What the transport left of a process that died (shm: its /dev/shm
  // blocks) goes here; one that exited normally removed it itself.
  transport::RemoveLeftoversOf(pid);
  if (WIFEXITED(wait_status)) exit_code_ = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) term_signal_ = WTERMSIG(wait_status);
  return true;
}

std::string ChildProcess::ExitDescription() const {
  if (!exited_) return "is still running";
  if (term_signal_ != 0) {
    const char* name = sigabbrev_np(term_signal_);
    return std::string("was killed by SIG") + (name ? name : std::to_string(term_signal_).c_str());
  }
  return "exited with status " + std::to_string(exit_code_);
}

}  // namespace een
