#include "launcher/leftovers.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

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
// which `remove(creator pid)` holds; returns how many, and counts in `kept`
// those it left.
int RemoveShm(const std::string& tag, const std::function<bool(pid_t)>& remove, int* kept) {
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
    if (!remove(creator)) {
      ++*kept;
    } else if (shm_unlink(("/" + name).c_str()) == 0) {
      ++removed;
    }
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
    // An --insecure job's objects all carry the tag "open".
    std::string tag = "open";
    if (auto secret = transport::ReadSecretFile((dir / "secret").string()); secret.ok()) {
      tag = transport::JobTagOf(*secret);
    } else if (fs::exists(dir / "secret", ec)) {
      tag.clear();
    }
    // Only objects whose creator is gone: the other nodes of a per-node launch share the job's
    // tag, and some may run on this host. The roles of a launcher just killed die with it, but a
    // busy machine may take a moment: they are waited for briefly, and a folder whose objects'
    // makers still live is kept for the next launch to look at again.
    int segments = 0, kept = 0;
    for (const auto start = std::chrono::steady_clock::now(); !tag.empty();) {
      kept = 0;
      segments += RemoveShm(
          tag, [](pid_t creator) { return !Alive(creator); }, &kept);
      if (kept == 0 || std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (kept > 0) continue;
    fs::remove_all(dir, ec);
    ++jobs;
    Say("removed what a killed job left behind: " + dir.string() + " and " +
        std::to_string(segments) + " shared-memory object(s)");
  }
  return jobs;
}

}  // namespace een
