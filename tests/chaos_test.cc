// Chaos: while a 2 PS + 4 worker job trains (snapshots every 100 steps), a
// seeded sequence of PS and coordinator kills, one every couple of seconds.
// The job must finish with parameters bitwise those of an undisturbed run,
// and leave no process behind. (Worker kills are left out on purpose: a lost
// worker changes the arithmetic by design, the mean is over the survivors.)
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "support/files.h"
#include "support/job_output.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

std::vector<std::string> Job(const std::string& dir, const std::string& out) {
  return {kBin + "/een-launch",
          "--ps",
          "2",
          "--workers",
          "4",
          "--snapshot-every",
          "100",
          "--snapshot-dir",
          dir,
          "--progress-interval",
          "200ms",
          "--",
          kBin + "/equivalence_train",
          "--optimizer",
          "sgd",
          "--steps",
          "6000",
          "--out",
          out};
}

TEST(Chaos, SeededKillsOfPsAndCoordinatorChangeNothing) {
  const std::string base = "/tmp/een-chaos-test-" + std::to_string(getpid());
  std::filesystem::remove_all(base);
  auto whole = testing::Run(Job(base + "/whole", base + "/whole.bin"), seconds(240));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(base + "/chaos", base + "/chaos.bin"));
  ASSERT_TRUE(job.WaitForCompleteSnapshot(100, seconds(60))) << job.output();
  std::vector<pid_t> seen = testing::ChildrenOf(job.pid());
  std::mt19937 rng(20261130);
  const std::vector<std::string> victims = {"ps 0", "ps 1", "coordinator"};
  int ps_kills = 0, coordinator_kills = 0, rounds = 0;
  while (ps_kills + coordinator_kills < 5 && rounds++ < 20) {
    std::string victim = victims[rng() % victims.size()];
    if (victim != "coordinator" && ps_kills == 3) victim = "coordinator";
    if (victim == "coordinator" && coordinator_kills == 2)
      victim = "ps " + std::to_string(rng() % 2);
    const pid_t pid = testing::NewestPid(job.output(), victim);
    ASSERT_GT(pid, 0) << victim << "\n" << job.output();
    if (kill(pid, SIGKILL) != 0) break;  // the job already ended
    for (pid_t c : testing::ChildrenOf(job.pid())) seen.push_back(c);
    const size_t mark = job.output().size();
    // Wait for this recovery, and the next complete snapshot, before the next kill.
    if (victim == "coordinator") {
      ++coordinator_kills;
      ASSERT_TRUE(job.WaitForOutput("took the job up again", seconds(20), mark)) << job.output();
    } else {
      ++ps_kills;
      ASSERT_TRUE(job.WaitForOutput("training resumes", seconds(20), mark)) << job.output();
    }
    if (!job.WaitForOutput("complete on all 2 PS", seconds(5), job.output().size())) break;
    for (pid_t c : testing::ChildrenOf(job.pid())) seen.push_back(c);
  }
  RecordProperty("ps_kills", std::to_string(ps_kills));
  RecordProperty("coordinator_kills", std::to_string(coordinator_kills));
  auto code = job.Wait(seconds(240));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_GE(ps_kills + coordinator_kills, 3) << "the job ended before the chaos did";
  EXPECT_EQ(testing::ReadBytes(base + "/chaos.bin"), testing::ReadBytes(base + "/whole.bin"))
      << "parameters differ after " << ps_kills << " PS and " << coordinator_kills
      << " coordinator kills";
  for (pid_t p : seen) EXPECT_FALSE(testing::ProcessExists(p)) << "pid " << p << " survived";
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace een
