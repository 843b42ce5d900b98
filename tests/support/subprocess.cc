#include "support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace een::testing {

using Clock = std::chrono::steady_clock;

Subprocess::Subprocess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env) {
  // Flight records of the tests' failing jobs go to the build folder, not
  // /tmp (a test that looks at them gives --flight-dir).
  std::error_code ec;
  std::filesystem::create_directories(EEN_TEST_FLIGHT_DIR, ec);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (!std::getenv("EEN_FLIGHT_DIR")) setenv("EEN_FLIGHT_DIR", EEN_TEST_FLIGHT_DIR, 1);
    for (const auto& [k, v] : env) {
      if (v.empty())
        unsetenv(k.c_str());
      else
        setenv(k.c_str(), v.c_str(), 1);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fd_ = fds[0];
  fcntl(fd_, F_SETFL, O_NONBLOCK);
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) close(fd_);
}

void Subprocess::ReadAvailable(int timeout_ms) {
  if (fd_ < 0) return;
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd_, buf, sizeof buf)) > 0) output_.append(buf, n);
  if (n == 0) {
    close(fd_);
    fd_ = -1;
  }
}

bool Subprocess::WaitForOutput(const std::string& text, std::chrono::milliseconds timeout,
                               size_t from) {
  const auto deadline = Clock::now() + timeout;
  while (output_.find(text, from) == std::string::npos) {
    if (Clock::now() > deadline || fd_ < 0) return false;
    ReadAvailable(20);
  }
  return true;
}

bool Subprocess::WaitUntil(const std::function<bool(const std::string&)>& ready,
                           std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!ready(output_)) {
    if (Clock::now() > deadline || fd_ < 0) return false;
    ReadAvailable(20);
  }
  return true;
}

bool Subprocess::WaitForCompleteSnapshot(uint64_t step, std::chrono::milliseconds timeout) {
  static const std::regex kComplete("snapshot of step ([0-9]+) complete on all");
  return WaitUntil(
      [step](const std::string& out) {
        for (std::sregex_iterator it(out.begin(), out.end(), kComplete), end; it != end; ++it) {
          if (std::stoull((*it)[1]) >= step) return true;
        }
        return false;
      },
      timeout);
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!exited_) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (Clock::now() > deadline) return std::nullopt;
    ReadAvailable(20);
  }
  while (fd_ >= 0) ReadAvailable(100);  // the rest of the output
  return exit_code_;
}

void Subprocess::Signal(int signo) const {
  if (pid_ > 0 && !exited_) kill(pid_, signo);
}

RunResult Run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::map<std::string, std::string>& env) {
  Subprocess p(argv, env);
  auto code = p.Wait(timeout);
  return {code.value_or(-1), p.output()};
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so start after ')'.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    char state;
    pid_t ppid;
    if (rest >> state >> ppid && ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

bool ProcessExists(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  std::istringstream rest(line.substr(line.rfind(')') + 1));
  char state = 'X';
  rest >> state;
  return state != 'Z' && state != 'X';  // a zombie is dead, only not yet reaped
}

std::string JobSecretFile(const std::string& launcher_output) {
  std::smatch m;
  if (!std::regex_search(launcher_output, m, std::regex("job secret in (\\S+) \\("))) return "";
  return m[1];
}

std::string WriteJobSecret(const std::string& path) {
  std::remove(path.c_str());
  {
    std::ofstream out(path);
    out << "0123456789abcdef0123456789abcdef" << std::to_string(getpid()) << "\n";
  }
  chmod(path.c_str(), 0600);
  return path;
}

std::string CoordinatorAddress(const std::string& launcher_output) {
  std::smatch m;
  if (!std::regex_search(launcher_output, m, std::regex("coordinator at (tcp://[0-9.:]+)")))
    return "";
  return m[1];
}

}  // namespace een::testing
