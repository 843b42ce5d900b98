// A killed een-launch's leftovers: the next een-launch removes them. Its
// own test binary, run alone (ctest RUN_SERIAL): any een-launch started in
// between, by any test, would remove them first, as it should.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "support/launch_command.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
using testing::Subprocess;

const std::string kBin = EEN_BIN_DIR;

using testing::LaunchCommand;

// een-launch itself killed (SIGKILL: it cannot clean up): its roles end,
// and the next een-launch removes the run folder and the shared memory the
// killed job left behind.
// The run folder of the launcher `pid` (its `launcher` file names it).
std::string RunFolderOf(pid_t pid) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/tmp", ec)) {
    if (e.path().filename().string().rfind("een-job-", 0) != 0) continue;
    std::ifstream in(e.path() / "launcher");
    pid_t p = 0;
    if (in >> p && p == pid) return e.path().string();
  }
  return "";
}

class Leftovers : public ::testing::TestWithParam<bool> {};  // --insecure or not

TEST_P(Leftovers, OfAKilledLauncherAreRemovedByTheNext) {
  std::vector<std::string> flags = {"--ps",        "2",   "--workers",           "2",
                                    "--transport", "shm", "--progress-interval", "200ms"};
  if (GetParam()) flags.push_back("--insecure");
  Subprocess job(LaunchCommand(flags, {kBin + "/fashion_mnist", "--epochs", "1000", "--train-limit",
                                       "512", "--test-limit", "10"}));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const std::string run_dir = RunFolderOf(job.pid());
  ASSERT_FALSE(run_dir.empty()) << job.output();
  std::vector<pid_t> children = testing::ChildrenOf(job.pid());
  job.Signal(SIGKILL);
  ASSERT_TRUE(job.Wait(seconds(10)).has_value());
  for (pid_t c : children) {  // they follow their launcher (parent-death signal)
    for (int i = 0; i < 200 && testing::ProcessExists(c); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(testing::ProcessExists(c)) << "pid " << c << " survived its launcher";
  }
  ASSERT_TRUE(std::filesystem::exists(run_dir)) << "nothing was left to test";
  auto next =
      testing::Run(LaunchCommand({"--ps", "1", "--workers", "1"}, {"/bin/true"}), seconds(60));
  EXPECT_TRUE(std::regex_search(next.output,
                                std::regex("removed what a killed job left behind: " + run_dir +
                                           " and [1-9][0-9]* shared-memory object")))
      << next.output;
  EXPECT_FALSE(std::filesystem::exists(run_dir));
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    for (pid_t c : children) {
      EXPECT_NE(e.path().filename().string().rfind("een-" + std::to_string(c) + "-", 0), 0u)
          << e.path() << " of the killed job is still there";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Launch, Leftovers, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Insecure" : "Secure"; });

}  // namespace
}  // namespace een
