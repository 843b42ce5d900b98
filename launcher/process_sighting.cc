// ProcessSighting: see process_sighting.h.
#include "launcher/process_sighting.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/job_env.h"

namespace een {
namespace {

// The fields of /proc/<pid>[/task/<tid>]/stat after the command name (which
// may hold spaces and parentheses): [0] is the state, [11] utime, [12] stime.
bool ReadStat(const std::string& path, std::string* fields) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return false;
  *fields = line.substr(close + 2);
  return true;
}

bool SameNamespace(int pid, const char* kind) {
  struct stat mine {
  }, theirs{};
  const std::string own = std::string("/proc/self/ns/") + kind;
  const std::string other = "/proc/" + std::to_string(pid) + "/ns/" + kind;
  return stat(own.c_str(), &mine) == 0 && stat(other.c_str(), &theirs) == 0 &&
         mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

}  // namespace

ProcessSighting SightProcess(int pid, const std::string& host) {
  ProcessSighting s;
  // (A role inside the caller's own process, as in-process test clusters
  // run them: /proc says nothing of it.)
  if (pid <= 0 || pid == getpid() || host != HostName()) return s;  // kElsewhere
  const std::string dir = "/proc/" + std::to_string(pid);
  std::string fields;
  if (!ReadStat(dir + "/stat", &fields)) {
    s.state = ProcessSighting::State::kGone;
    return s;
  }
  std::istringstream in(fields);
  std::string state;
  in >> state;
  if (state == "Z" || state == "X" || state == "x") {  // (its namespaces are gone too)
    s.state = ProcessSighting::State::kGone;
    return s;
  }
  // A pid of another pid namespace is another process; one of another
  // network namespace is a simulated host behind a network of its own.
  if (!SameNamespace(pid, "pid") || !SameNamespace(pid, "net")) return s;
  std::string skip;
  for (int i = 1; i < 11; ++i) in >> skip;
  uint64_t utime = 0, stime = 0;
  in >> utime >> stime;
  const long hz = sysconf(_SC_CLK_TCK);
  s.cpu = (utime + stime) * (1'000'000'000 / static_cast<uint64_t>(hz > 0 ? hz : 100));
  if (state == "T" || state == "t") {
    s.state = ProcessSighting::State::kStopped;
    return s;
  }
  s.state = ProcessSighting::State::kIdle;
  // Each thread's time on a CPU in nanoseconds (schedstat), finer than the
  // 10 ms ticks of stat: a heartbeat costs microseconds.
  uint64_t cpu_ns = 0;
  bool schedstat = true;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir + "/task", ec)) {
    std::string thread;
    if (!ReadStat(task.path().string() + "/stat", &thread) || thread.empty()) continue;
    if (thread[0] == 'R' || thread[0] == 'D') s.state = ProcessSighting::State::kRunnable;
    std::ifstream sched(task.path().string() + "/schedstat");
    uint64_t ns = 0;
    if (sched >> ns) {
      cpu_ns += ns;
    } else {
      schedstat = false;
    }
  }
  if (schedstat && cpu_ns > 0) s.cpu = cpu_ns;
  return s;
}

const char* SightingName(ProcessSighting::State state) {
  switch (state) {
    case ProcessSighting::State::kElsewhere:
      return "elsewhere";
    case ProcessSighting::State::kGone:
      return "gone";
    case ProcessSighting::State::kStopped:
      return "stopped";
    case ProcessSighting::State::kRunnable:
      return "running";
    case ProcessSighting::State::kIdle:
      return "asleep";
  }
  return "?";
}

}  // namespace een
