#include "launcher/job_discovery.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

namespace een {
namespace fs = std::filesystem;
namespace {

// The run folders of this user's een-launch processes alive on this machine.
std::vector<fs::path> LiveRunFolders() {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/tmp", ec)) {
    if (entry.path().filename().string().rfind("een-job-", 0) != 0) continue;
    struct stat st {};
    if (stat(entry.path().c_str(), &st) != 0 || st.st_uid != geteuid()) continue;
    std::ifstream in(entry.path() / "launcher");
    pid_t pid = 0;
    if (!(in >> pid) || pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) continue;
    found.push_back(entry.path());
  }
  return found;
}

std::string AddressIn(const fs::path& run_folder) {
  std::ifstream in(run_folder / "coordinator");
  std::string address;
  in >> address;
  return address;
}

}  // namespace

Result<std::string> FindCoordinator(const std::string& given) {
  // "HOST:PORT" is the tcp address een-launch printed, without its scheme.
  auto with_scheme = [](const std::string& a) {
    return a.find("://") == std::string::npos ? "tcp://" + a : a;
  };
  if (!given.empty()) return with_scheme(given);
  if (const char* env = std::getenv("EEN_COORDINATOR"); env && *env) {
    return with_scheme(std::string(env));
  }
  std::vector<std::string> addresses;
  for (const fs::path& folder : LiveRunFolders()) {
    if (std::string a = AddressIn(folder); !a.empty()) addresses.push_back(a);
  }
  if (addresses.size() == 1) return addresses.front();
  if (addresses.empty()) {
    return NotFound(
        "no running job found on this machine (no een-launch of yours runs here): pass "
        "--coordinator ADDRESS, the address een-launch printed ('coordinator at ...')");
  }
  std::string list;
  for (const std::string& a : addresses) list += (list.empty() ? "" : ", ") + a;
  return FailedPrecondition("several jobs run on this machine (coordinators " + list +
                            "): pick one with --coordinator ADDRESS");
}

Result<std::string> FindSecretFile(const std::string& coordinator, const std::string& given) {
  if (!given.empty()) return given;
  if (const char* f = std::getenv("EEN_JOB_SECRET_FILE"); f && *f) return std::string(f);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/tmp", ec)) {
    if (entry.path().filename().string().rfind("een-job-", 0) != 0) continue;
    if (AddressIn(entry.path()) != coordinator) continue;
    const auto secret = entry.path() / "secret";
    return fs::exists(secret, ec) ? secret.string() : std::string();
  }
  return FailedPrecondition(
      "cannot find the secret of the job at " + coordinator +
      " (no een-launch run folder on this machine names it): pass --secret-file PATH, the path "
      "een-launch printed ('job secret in ...')");
}

}  // namespace een
