// PS loss with two replicas: the lost PS's backups take over with no
// rollback, a replacement PS joins to hold new backups, and the final
// parameters are bitwise those of an undisturbed run. Then a chaos run:
// seeded PS and coordinator kills, one after each recovery.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

#include "support/files.h"
#include "support/job_output.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

std::vector<std::string> Job(int ps, int workers, int steps, const std::string& out,
                             int spares = 0) {
  return {kBin + "/een-launch",
          "--ps",
          std::to_string(ps),
          "--workers",
          std::to_string(workers),
          "--replicas",
          "2",
          "--spare-ps",
          std::to_string(spares),
          "--progress-interval",
          "200ms",
          "--",
          kBin + "/equivalence_train",
          "--optimizer",
          "adam",
          "--steps",
          std::to_string(steps),
          "--out",
          out};
}

class Replicas : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = "/tmp/een-replicas-test-" + std::to_string(getpid());
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
  }
  void TearDown() override { std::filesystem::remove_all(base_); }
  std::string base_;
};

TEST_F(Replicas, KilledPsFailsOverToItsBackupsAndTheRunIsBitwiseTheSame) {
  auto whole = testing::Run(Job(3, 2, 4000, base_ + "/whole.bin"), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(3, 2, 4000, base_ + "/killed.bin"));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::mt19937 rng(3);  // a seeded, "random" step: 0.1-1.1 s into training
  std::this_thread::sleep_for(milliseconds(100 + rng() % 1000));
  const pid_t ps = testing::NewestPid(job.output(), "ps 1");
  ASSERT_GT(ps, 0) << job.output();
  const size_t mark = job.output().size();
  const auto kill_time = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  ASSERT_TRUE(
      job.WaitForOutput("sending this step's gradients to their new primaries", seconds(30), mark))
      << job.output();
  RecordProperty("kill_to_resume_ms",
                 std::to_string(std::chrono::duration_cast<milliseconds>(
                                    std::chrono::steady_clock::now() - kill_time)
                                    .count()));
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  const std::string out = job.output().substr(mark);
  EXPECT_NE(out.find("failing over: its"), std::string::npos) << out;
  EXPECT_NE(out.find("ps 1 (host"), std::string::npos) << out;
  EXPECT_NE(out.find("joins the running job"), std::string::npos) << out;
  EXPECT_EQ(out.find("rolling back"), std::string::npos) << "replicas 2 must not roll back";
  const std::string expected = testing::ReadBytes(base_ + "/whole.bin");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(testing::ReadBytes(base_ + "/killed.bin"), expected)
      << "parameters differ after the failover";
}

TEST_F(Replicas, SpareTakesOverALostPsAndLeavesWhenTheJobEnds) {
  auto whole = testing::Run(Job(2, 2, 3000, base_ + "/whole.bin"), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(2, 2, 3000, base_ + "/spare.bin", /*spares=*/1));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  ASSERT_NE(job.output().find("spare PS registered"), std::string::npos) << job.output();
  const pid_t ps = testing::NewestPid(job.output(), "ps 0");
  ASSERT_GT(ps, 0) << job.output();
  const size_t mark = job.output().size();
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  ASSERT_TRUE(job.WaitForOutput("takes over as ps 0", seconds(20), mark)) << job.output();
  ASSERT_TRUE(job.WaitForOutput("(its backups are built)", seconds(20), mark)) << job.output();
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  const std::string out = job.output().substr(mark);
  EXPECT_NE(out.find("a spare takes over, and a new spare starts"), std::string::npos) << out;
  EXPECT_NE(out.find("this spare was not needed"), std::string::npos)
      << "the new spare must leave at the end\n"
      << out;
  EXPECT_EQ(testing::ReadBytes(base_ + "/spare.bin"), testing::ReadBytes(base_ + "/whole.bin"))
      << "parameters differ after the spare took over";
}

// 2 PS + 4 workers, replicas 2: a seeded sequence of PS and coordinator
// kills, each after the previous recovery finished (a PS kill right after
// another, before the replacement's backups are built, would find a shard
// with no live copy). Workers are left out: a lost worker changes the
// arithmetic by design (the mean is over the survivors).
TEST_F(Replicas, ChaosOfPsAndCoordinatorKillsChangesNothing) {
  auto whole = testing::Run(Job(2, 4, 3000, base_ + "/whole.bin"), seconds(240));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(2, 4, 3000, base_ + "/chaos.bin"));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::vector<pid_t> seen = testing::ChildrenOf(job.pid());
  std::mt19937 rng(20261130);
  const std::vector<std::string> victims = {"ps 0", "ps 1", "coordinator"};
  int ps_kills = 0, coordinator_kills = 0, rounds = 0;
  while (ps_kills + coordinator_kills < 5 && rounds++ < 20) {
    std::this_thread::sleep_for(milliseconds(200 + rng() % 600));
    std::string victim = victims[rng() % victims.size()];
    if (victim != "coordinator" && ps_kills == 3) victim = "coordinator";
    if (victim == "coordinator" && coordinator_kills == 2)
      victim = "ps " + std::to_string(rng() % 2);
    const pid_t pid = testing::NewestPid(job.output(), victim);
    ASSERT_GT(pid, 0) << victim << "\n" << job.output();
    const size_t mark = job.output().size();
    if (kill(pid, SIGKILL) != 0) break;  // the job already ended
    for (pid_t c : testing::ChildrenOf(job.pid())) seen.push_back(c);
    if (victim == "coordinator") {
      ++coordinator_kills;
      if (!job.WaitForOutput("took the job up again", seconds(20), mark)) break;
    } else {
      ++ps_kills;
      // The replacement joined and holds every backup: the next loss is survivable.
      if (!job.WaitForOutput("(its backups are built)", seconds(20), mark)) break;
    }
    for (pid_t c : testing::ChildrenOf(job.pid())) seen.push_back(c);
  }
  RecordProperty("ps_kills", std::to_string(ps_kills));
  RecordProperty("coordinator_kills", std::to_string(coordinator_kills));
  auto code = job.Wait(seconds(240));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_GE(ps_kills + coordinator_kills, 3) << "the job ended before the chaos did";
  EXPECT_EQ(testing::ReadBytes(base_ + "/chaos.bin"), testing::ReadBytes(base_ + "/whole.bin"))
      << "parameters differ after " << ps_kills << " PS and " << coordinator_kills
      << " coordinator kills";
  for (pid_t p : seen) EXPECT_FALSE(testing::ProcessExists(p)) << "pid " << p << " survived";
}

}  // namespace
}  // namespace een
