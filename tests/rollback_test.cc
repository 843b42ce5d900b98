// PS loss with one replica: the job rolls back to its last complete snapshot,
// a replacement PS takes the lost one's shards, the workers redo the lost
// steps, and the final parameters are bitwise those of an undisturbed run.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "support/files.h"
#include "support/job_output.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

std::vector<std::string> Job(const std::string& dir, const std::string& out) {
  return {kBin + "/een-launch",
          "--ps",
          "2",
          "--workers",
          "2",
          "--snapshot-every",
          "100",
          "--snapshot-dir",
          dir,
          "--",
          kBin + "/equivalence_train",
          "--optimizer",
          "adam",
          "--steps",
          "2500",
          "--out",
          out};
}

TEST(Rollback, KilledPsIsReplacedAndTheRedoneRunIsBitwiseTheSame) {
  const std::string base = "/tmp/een-rollback-test-" + std::to_string(getpid());
  std::filesystem::remove_all(base);
  auto whole = testing::Run(Job(base + "/whole", base + "/whole.bin"), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(base + "/killed", base + "/killed.bin"));
  ASSERT_TRUE(job.WaitForCompleteSnapshot(300, seconds(120))) << job.output();
  const pid_t ps = testing::NewestPid(job.output(), "ps 1");
  ASSERT_GT(ps, 0) << job.output();
  const auto kill_time = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  ASSERT_TRUE(job.WaitForOutput("training resumes", seconds(30))) << job.output();
  RecordProperty("kill_to_resume_ms",
                 std::to_string(std::chrono::duration_cast<milliseconds>(
                                    std::chrono::steady_clock::now() - kill_time)
                                    .count()));
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  const std::string& out = job.output();
  EXPECT_NE(out.find("starting a replacement: the job rolls back to its last complete snapshot"),
            std::string::npos)
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("rolling back to the snapshot of step [0-9]+: "
                                                "steps [0-9]+-[0-9]+ are redone")))
      << out;
  EXPECT_NE(out.find("rolled back to step"), std::string::npos) << out;
  const std::string expected = testing::ReadBytes(base + "/whole.bin");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(testing::ReadBytes(base + "/killed.bin"), expected)
      << "parameters differ after the rollback";
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace een
