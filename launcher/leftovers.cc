#include "launcher/leftovers.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/logging.h"
#include "common/transport/auth.h"
#include "launcher/say.h"

namespace een {
namespace fs = std::filesystem;

void MarkRunFolder(const std::string& run_dir) {
  std::ofstream(run_dir + "/launcher") << getpid() << '\n';
}

std::string NewRunFolder() {
  RemoveLeftoversOfDeadJobs();  // of this user's jobs killed before they could clean up
  char tmpl[] = "/tmp/een-job-XXXXXX";
  if (!mkdtemp(tmpl)) return "";
  MarkRunFolder(tmpl);
  return tmpl;
}

namespace {

// A zombie (dead, not yet reaped by whoever adopted it) is not alive.
bool Alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) return true;
  const size_t state = line.find_first_not_of(' ', line.rfind(')') + 1);
  return state == std::string::npos || (line[state] != 'Z' && line[state] != 'X');
}

// Unlinks this user's /dev/shm objects "een-PID-TAG-..." with `tag` for
// which `remove(creator pid)` holds; returns how many.
int RemoveShm(const std::string& tag, const std::function<bool(pid_t)>& remove) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("een-", 0) != 0) continue;
    const size_t dash = name.find('-', 4);
    if (dash == std::string::npos || name.compare(dash + 1, tag.size() + 1, tag + "-") != 0)
      continue;
    struct stat st {};
    if (stat(e.path().c_str(), &st) != 0 || st.st_uid != geteuid()) continue;
    const pid_t creator = static_cast<pid_t>(std::strtol(name.c_str() + 4, nullptr, 10));
    if (remove(creator) && shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace

int RemoveLeftoversOfDeadJobs() {
  int jobs = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/tmp", ec)) {
    const fs::path dir = e.path();
    if (dir.filename().string().rfind("een-job-", 0) != 0) continue;
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || st.st_uid != geteuid()) continue;
    std::ifstream in(dir / "launcher");
    pid_t pid = 0;
    if (!(in >> pid) || Alive(pid)) continue;
    int segments = 0;
    if (auto secret = transport::ReadSecretFile((dir / "secret").string()); secret.ok()) {
      // Only objects whose creator is gone: the other nodes of a per-node
      // launch share the job's tag, and some may run on this host.
      segments =
          RemoveShm(transport::JobTagOf(*secret), [](pid_t creator) { return !Alive(creator); });
    } else if (!fs::exists(dir / "secret", ec)) {
      // An --insecure job's objects all carry the tag "open": those whose
      // creator is gone.
      segments = RemoveShm("open", [](pid_t creator) { return !Alive(creator); });
    }
    fs::remove_all(dir, ec);
    ++jobs;
    Say("removed what a killed job left behind: " + dir.string() + " and " +
        std::to_string(segments) + " shared-memory object(s)");
  }
  return jobs;
}

}  // namespace een
