// Coordinator loss: een-launch restarts it from its RocksDB state, the others
// find it again, and training ends bitwise where an undisturbed run ends;
// under async, NextBatch() deals on from the count it saved.
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

// SIGKILLs `job`'s coordinator and waits for the job to end well.
void KillTheCoordinatorAndFinish(testing::Subprocess& job) {
  const pid_t coordinator = testing::NewestPid(job.output(), "coordinator");
  ASSERT_GT(coordinator, 0) << job.output();
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  const std::optional<int> code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
}

TEST(CoordinatorRestart, KilledCoordinatorIsRestartedAndNothingIsLost) {
  const std::string base = "/tmp/een-coordinator-test-" + std::to_string(getpid());
  auto whole = testing::Run(Job(base + "-whole.bin"), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(base + "-killed.bin"));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  ASSERT_NO_FATAL_FAILURE(KillTheCoordinatorAndFinish(job));
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
  ASSERT_NO_FATAL_FAILURE(KillTheCoordinatorAndFinish(job));
  EXPECT_TRUE(std::regex_search(job.output(), std::regex("the job had not started; starting over")))
      << job.output();
  EXPECT_EQ(testing::ReadBytes(base + "-killed.bin"), testing::ReadBytes(base + "-whole.bin"));
  std::remove((base + "-whole.bin").c_str());
  std::remove((base + "-killed.bin").c_str());
}

// Under async, DataParallel::NextBatch() deals batches from a counter the
// coordinator saves every 256 batches: killed and restarted, it deals on
// from the saved count, so no batch is skipped and fewer than 256 are dealt
// twice (before, the counter started again from 0).
TEST(CoordinatorRestart, NextBatchDealsOnFromTheSavedCount) {
  constexpr uint64_t kBatches = 20000;  // seconds of work: the kill comes well before the end
  testing::Subprocess job({kBin + "/een-launch", "--ps", "1", "--workers", "2", "--consistency",
                           "async", "--progress-interval", "200ms", "--",
                           kBin + "/consistency_train", "--out",
                           "/tmp/een-coordinator-dealt-" + std::to_string(getpid()), "--numel",
                           "1000", "--dealt", std::to_string(kBatches)});
  const std::regex progress("progress: step ([0-9]+)");
  ASSERT_TRUE(job.WaitUntil(
      [&](const std::string& out) {
        for (std::sregex_iterator it(out.begin(), out.end(), progress), end; it != end; ++it) {
          if (std::stoull((*it)[1]) >= 300) return true;  // 2 workers: 600 batches or more
        }
        return false;
      },
      seconds(60)))
      << job.output();
  ASSERT_NO_FATAL_FAILURE(KillTheCoordinatorAndFinish(job));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.output(), m,
                                std::regex("NextBatch\\(\\) deals on from batch ([0-9]+)")))
      << job.output();
  EXPECT_GE(std::stoull(m[1]), 256u);
  uint64_t taken = 0;
  const std::regex dealt("worker [0-9] dealt ([0-9]+) batches");
  const std::string& out = job.output();
  for (std::sregex_iterator it(out.begin(), out.end(), dealt), end; it != end; ++it) {
    taken += std::stoull((*it)[1]);
  }
  EXPECT_GE(taken, kBatches) << "a batch was skipped\n" << out;
  EXPECT_LT(taken, kBatches + 256) << "too many batches dealt twice\n" << out;
}

}  // namespace
}  // namespace een
