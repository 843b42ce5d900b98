// Coordinator loss: een-launch restarts it from its RocksDB state, the others
// find it again, and training ends bitwise where an undisturbed run ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "support/files.h"
#include "support/job_output.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

std::vector<std::string> Job(const std::string& out) {
  return {kBin + "/een-launch",
          "--ps",
          "2",
          "--workers",
          "2",
          "--progress-interval",
          "200ms",
          "--",
          kBin + "/equivalence_train",
          "--optimizer",
          "adam",
          "--steps",
          "3000",
          "--out",
          out};
}

TEST(CoordinatorRestart, KilledCoordinatorIsRestartedAndNothingIsLost) {
  const std::string base = "/tmp/een-coordinator-test-" + std::to_string(getpid());
  auto whole = testing::Run(Job(base + "-whole.bin"), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(base + "-killed.bin"));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const pid_t coordinator = testing::NewestPid(job.output(), "coordinator");
  ASSERT_GT(coordinator, 0) << job.output();
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("was killed by SIGKILL; restarting it from its saved state"),
            std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("took the job up again"), std::string::npos) << job.output();
  EXPECT_NE(job.output().find("the coordinator restarted; greeting it"), std::string::npos);
  const std::string expected = testing::ReadBytes(base + "-whole.bin");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(testing::ReadBytes(base + "-killed.bin"), expected)
      << "parameters differ after the restart";
  std::remove((base + "-whole.bin").c_str());
  std::remove((base + "-killed.bin").c_str());
}

// Killed before the job started (the PS have registered, the workers are
// still loading): the restarted coordinator starts over, everyone registers
// again (they repeat it until the job starts), and the job runs normally.
TEST(CoordinatorRestart, KilledDuringStartUpTheJobStillStarts) {
  const std::string base = "/tmp/een-coordinator-startup-test-" + std::to_string(getpid());
  auto whole = testing::Run(Job(base + "-whole.bin"), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(base + "-killed.bin"));
  ASSERT_TRUE(job.WaitForOutput("registered ps 1", seconds(60))) << job.output();
  ASSERT_EQ(job.output().find("job starts"), std::string::npos) << "too late: the job started";
  const pid_t coordinator = testing::NewestPid(job.output(), "coordinator");
  ASSERT_GT(coordinator, 0) << job.output();
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_TRUE(std::regex_search(job.output(), std::regex("the job had not started; starting over")))
      << job.output();
  EXPECT_EQ(testing::ReadBytes(base + "-killed.bin"), testing::ReadBytes(base + "-whole.bin"));
  std::remove((base + "-whole.bin").c_str());
  std::remove((base + "-killed.bin").c_str());
}

}  // namespace
}  // namespace een
