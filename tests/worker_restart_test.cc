// Worker replacement (een-launch --max-restarts): a worker killed mid-epoch
// is replaced; the replacement pulls the current parameters and joins at
// the step every PS agrees on, and the data stays re-sharded so that no
// sample of an epoch is trained twice and at most the lost worker's last
// two batches go untrained (the steps in flight when it died).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/coverage_records.h"
#include "support/job_output.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;
constexpr int kSamples = 20000, kBatch = 4;

// `loop`: coverage_train's, explicit (PositionAfter) or plain (JobSampler).
void ReplacementJoinsAndEverySampleIsTrainedAtMostOnce(const std::vector<std::string>& loop) {
  const bool plain = !loop.empty();
  const std::string dir = "/tmp/een-restart-test-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::string> argv = {kBin + "/een-launch",
                                   "--ps",
                                   "2",
                                   "--workers",
                                   "3",
                                   "--max-restarts",
                                   "1",
                                   "--progress-interval",
                                   "200ms",
                                   "--",
                                   kBin + "/coverage_train",
                                   "--record",
                                   dir,
                                   "--samples",
                                   std::to_string(kSamples),
                                   "--batch",
                                   std::to_string(kBatch)};
  argv.insert(argv.end(), loop.begin(), loop.end());
  testing::Subprocess job(argv);
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::this_thread::sleep_for(milliseconds(300));
  const pid_t victim = testing::NewestPid(job.output(), "worker 1");
  ASSERT_GT(victim, 0) << job.output();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  const std::string& out = job.output();
  EXPECT_NE(out.find("starting a replacement that joins the running job"), std::string::npos)
      << out;
  EXPECT_NE(out.find("worker 1 takes part from step"), std::string::npos) << out;
  EXPECT_NE(out.find("job finished: 3 of 3 workers succeeded"), std::string::npos) << out;

  // The steps of the victim's the job says were not trained.
  uint64_t lost_from = UINT64_MAX;
  std::smatch unfinished;
  if (std::regex_search(
          out, unfinished,
          std::regex("worker 1's batches of steps ([0-9]+)-[0-9]+ were not trained"))) {
    lost_from = std::stoull(unfinished[1]);
  }
  int files = 0;
  const testing::Record steps = testing::ReadRecords(dir, &files, victim, lost_from);
  EXPECT_EQ(files, 4) << "3 workers and 1 replacement";
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& [epoch, by_step] : steps) {
    const int distinct = testing::DistinctSamples(by_step, epoch);
    // The plain loop's sampler deals a lost worker's unfinished steps
    // again; the explicit loop loses them (up to two batches).
    EXPECT_GE(distinct, plain ? kSamples : kSamples - 2 * kBatch)
        << "epoch " << epoch << " left samples untrained";
    ::testing::Test::RecordProperty("epoch" + std::to_string(epoch) + "_untrained",
                                    std::to_string(kSamples - distinct));
  }
  std::filesystem::remove_all(dir);
}

TEST(WorkerRestart, ReplacementJoinsAndEverySampleIsTrainedAtMostOnce) {
  ReplacementJoinsAndEverySampleIsTrainedAtMostOnce({});
}

// The same with a plain loop: een::JobSampler follows the job by itself.
TEST(WorkerRestart, APlainLoopOverJobSamplerFollowsTheReplacementToo) {
  ReplacementJoinsAndEverySampleIsTrainedAtMostOnce({"--job-sampler"});
}

// Adding capacity: a third worker, started by hand with the job's
// coordinator address and the next rank, joins the running job; from the
// agreed step three workers share every epoch, and no sample is lost or
// trained twice.
TEST(WorkerRestart, NewWorkerJoinsARunningJob) {
  const std::string dir = "/tmp/een-join-test-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::string> train = {
      kBin + "/coverage_train", "--record", dir, "--samples", std::to_string(kSamples), "--batch",
      std::to_string(kBatch)};
  std::vector<std::string> launch = {kBin + "/een-launch",  "--ps",  "2", "--workers", "2",
                                     "--progress-interval", "200ms", "--"};
  launch.insert(launch.end(), train.begin(), train.end());
  testing::Subprocess job(launch);
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  ASSERT_FALSE(coordinator.empty()) << job.output();
  testing::Subprocess extra(train, {{"EEN_COORDINATOR", coordinator},
                                    {"EEN_ROLE", "worker"},
                                    {"EEN_RANK", "2"},
                                    {"EEN_WORLD_SIZE", "3"},
                                    {"EEN_NUM_PS", "2"},
                                    {"EEN_DATA_TRANSPORT", "tcp"},
                                    {"EEN_HOST", "127.0.0.1"},
                                    {"OMP_NUM_THREADS", "1"},
                                    {"EEN_JOB_SECRET_FILE", testing::JobSecretFile(job.output())}});
  auto extra_code = extra.Wait(seconds(120));
  ASSERT_TRUE(extra_code.has_value()) << extra.output();
  EXPECT_EQ(*extra_code, 0) << extra.output() << job.output();
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("joins the running job as a new worker (3 in all)"),
            std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("worker 2 takes part from step"), std::string::npos) << job.output();
  int files = 0;
  const testing::Record steps = testing::ReadRecords(dir, &files);
  EXPECT_EQ(files, 3);
  for (const auto& [epoch, by_step] : steps) {
    EXPECT_EQ(testing::DistinctSamples(by_step, epoch), kSamples) << "epoch " << epoch;
  }
  std::filesystem::remove_all(dir);
}

// Chaos of every role: 2 PS (replicas 2) + 4 workers (--max-restarts 5);
// a seeded sequence of PS, coordinator and worker kills, each after the
// previous recovery. The job must finish, leave no process behind, and
// train no sample twice in an epoch (a lost worker's last batches may go
// untrained: at most two per worker kill).
TEST(WorkerRestart, ChaosOfEveryRoleFinishesWithNoSampleTrainedTwice) {
  const std::string dir = "/tmp/een-chaos-all-test-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  constexpr int kMany = 60000;
  testing::Subprocess job({kBin + "/een-launch", "--ps", "2", "--workers", "4", "--replicas", "2",
                           "--max-restarts", "5", "--progress-interval", "200ms", "--",
                           kBin + "/coverage_train", "--record", dir, "--samples",
                           std::to_string(kMany), "--batch", std::to_string(kBatch)});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::vector<pid_t> seen = testing::ChildrenOf(job.pid());
  std::mt19937 rng(7);
  const std::vector<std::string> victims = {"ps 0",     "ps 1",     "coordinator", "worker 0",
                                            "worker 1", "worker 2", "worker 3"};
  int kills = 0, worker_kills = 0;
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(milliseconds(200 + rng() % 500));
    const std::string victim = victims[rng() % victims.size()];
    const pid_t pid = testing::NewestPid(job.output(), victim);
    ASSERT_GT(pid, 0) << victim << "\n" << job.output();
    const size_t mark = job.output().size();
    if (kill(pid, SIGKILL) != 0) break;  // the job already ended
    ++kills;
    for (pid_t c : testing::ChildrenOf(job.pid())) seen.push_back(c);
    const char* recovered = victim == "coordinator"      ? "took the job up again"
                            : victim.rfind("ps", 0) == 0 ? "(its backups are built)"
                                                         : "takes part from step";
    if (victim.rfind("worker", 0) == 0) ++worker_kills;
    if (!job.WaitForOutput(recovered, seconds(30), mark)) break;
    for (pid_t c : testing::ChildrenOf(job.pid())) seen.push_back(c);
  }
  RecordProperty("kills", std::to_string(kills));
  RecordProperty("worker_kills", std::to_string(worker_kills));
  auto code = job.Wait(seconds(240));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_GE(kills, 3) << "the job ended before the chaos did";
  for (pid_t p : seen) EXPECT_FALSE(testing::ProcessExists(p)) << "pid " << p << " survived";
  int files = 0;
  const testing::Record steps = testing::ReadRecords(dir, &files);
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& [epoch, by_step] : steps) {
    EXPECT_GE(testing::DistinctSamples(by_step, epoch), kMany - 2 * kBatch * (worker_kills + 1))
        << "epoch " << epoch;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace een
