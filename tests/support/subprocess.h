// Subprocess: runs a program for a test, collecting its merged output, with
// every wait bounded. The destructor kills (SIGKILL) and reaps what is left.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace een::testing {

class Subprocess {
 public:
  // `env` entries are set (or, with an empty value, removed) for the child.
  Subprocess(const std::vector<std::string>& argv,
             const std::map<std::string, std::string>& env = {});
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;

  // Reads output until `text` appears at or after byte `from`; false on
  // timeout or exit first.
  bool WaitForOutput(const std::string& text, std::chrono::milliseconds timeout, size_t from = 0);
  // Reads output until `ready(output)` holds; false on timeout or exit first.
  bool WaitUntil(const std::function<bool(const std::string&)>& ready,
                 std::chrono::milliseconds timeout);
  // Reads output until the coordinator reports a snapshot of step `step` or
  // later complete on every PS. (It reports the newest complete one it
  // learns of, so a step between two heartbeats may never be named.)
  bool WaitForCompleteSnapshot(uint64_t step, std::chrono::milliseconds timeout);
  // Exit code (128 + signal when killed), or nullopt if still running at timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  void Signal(int signo) const;
  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

 private:
  void ReadAvailable(int timeout_ms);
  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  std::string output_;
};

// The coordinator's address een-launch prints ("coordinator at tcp://..."),
// or "" if it is not in `launcher_output` (yet).
std::string CoordinatorAddress(const std::string& launcher_output);
// The job secret file een-launch prints ("job secret in PATH (...").
std::string JobSecretFile(const std::string& launcher_output);
// A new job secret in `path` (0600), for roles a test starts by hand.
std::string WriteJobSecret(const std::string& path);

struct RunResult {
  int exit_code;  // -1 when it timed out (and was killed)
  std::string output;
};
RunResult Run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::map<std::string, std::string>& env = {});

// Direct children of `parent`, from /proc.
std::vector<pid_t> ChildrenOf(pid_t parent);
bool ProcessExists(pid_t pid);

}  // namespace een::testing
