// End to end through een-launch: a real training run, a killed PS, Ctrl-C,
// a failing worker, a program started without een-launch, and bad flags.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "support/job_output.h"
#include "support/launch_command.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Subprocess;

const std::string kBin = EEN_BIN_DIR;

using testing::LaunchCommand;

// A job that trains long enough to be interrupted.
std::vector<std::string> LongJob() {
  return LaunchCommand(
      {"--ps", "2", "--workers", "2", "--progress-interval", "200ms"},
      {kBin + "/fashion_mnist", "--epochs", "1000", "--train-limit", "512", "--test-limit", "10"});
}

TEST(Launch, FashionMnistSubsetReachesAccuracy) {
  auto r = testing::Run(LaunchCommand({"--ps", "2", "--workers", "2"},
                                      {kBin + "/fashion_mnist", "--epochs", "2", "--train-limit",
                                       "8000", "--test-limit", "2000"}),
                        seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("test accuracy: ([0-9.]+)%"))) << r.output;
  EXPECT_GE(std::stod(m[1]), 75.0) << r.output;
  RecordProperty("test_accuracy", m[1].str());
  EXPECT_NE(r.output.find("progress: step"), std::string::npos) << "no progress line";
  EXPECT_NE(r.output.find("[een-launch] job finished"), std::string::npos);
}

TEST(Launch, SumModeSampleTrainsWithWorkerSideOptimizer) {
  auto r = testing::Run(
      LaunchCommand({"--ps", "1", "--workers", "2"},
                    {kBin + "/local_optimizer", "--train-limit", "8000", "--test-limit", "2000"}),
      seconds(180));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("test accuracy: ([0-9.]+)%"))) << r.output;
  EXPECT_GE(std::stod(m[1]), 70.0) << r.output;
  EXPECT_NE(r.output.find("optimizer on this worker (sum mode)"), std::string::npos);
}

TEST(Launch, KilledPsEndsTheJobWithin5sNamingIt) {
  Subprocess job(LongJob());
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const pid_t ps = testing::NewestPid(job.output(), "ps 1");
  ASSERT_GT(ps, 0) << job.output();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  auto code = job.Wait(seconds(5));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(code.has_value()) << "een-launch still running 5 s after the kill\n" << job.output();
  EXPECT_NE(*code, 0);
  EXPECT_LT(took, seconds(5));
  EXPECT_NE(job.output().find("ps 1 (pid " + std::to_string(ps) + ") was killed by SIGKILL"),
            std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("job failed"), std::string::npos) << job.output();
  // The coordinator's verdict names the process, its host, the cause (een-launch
  // saw it end: no wait for the failover threshold) and the step.
  EXPECT_TRUE(std::regex_search(
      job.output(), std::regex("job failed: ps 1 \\(host [^,]+, pid " + std::to_string(ps) +
                               "\\) was killed by SIGKILL \\(seen by een-launch\\); "
                               "the job was at step [0-9]+; ending the job")))
      << job.output();
}

double Accuracy(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("test accuracy: ([0-9.]+)%"))) return -1;
  return std::stod(m[1]);
}

TEST(Launch, LostWorkerJobGoesOnWithinOnePointOfAccuracy) {
  const std::vector<std::string> flags = {"--ps", "2", "--workers", "4", "--min-workers", "2"};
  const std::vector<std::string> train = {
      kBin + "/fashion_mnist", "--epochs", "2", "--train-limit", "20000", "--test-limit", "5000",
      "--log-every",           "10"};
  auto undisturbed = testing::Run(LaunchCommand(flags, train), seconds(180));
  ASSERT_EQ(undisturbed.exit_code, 0) << undisturbed.output;

  Subprocess job(LaunchCommand(flags, train));
  ASSERT_TRUE(job.WaitForOutput("epoch 1 step 40 ", seconds(60))) << job.output();
  const pid_t worker = testing::NewestPid(job.output(), "worker 2");
  ASSERT_GT(worker, 0) << job.output();
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  auto code = job.Wait(seconds(180));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  const std::string& out = job.output();
  EXPECT_NE(out.find("worker 2 (pid " + std::to_string(worker) +
                     ") was killed by SIGKILL; the "
                     "job goes on with 3 workers"),
            std::string::npos)
      << out;
  // Its share of the data goes to the survivors, from one agreed step.
  EXPECT_TRUE(
      std::regex_search(out, std::regex("live workers \\(0,1,3\\) share the rest of each "
                                        "epoch's data \\(re-sharded: a lost worker's share")))
      << out;
  for (const char* w : {"worker 0", "worker 1", "worker 3"}) {
    EXPECT_TRUE(std::regex_search(
        out, std::regex(std::string("\\[") + w +
                        "\\].*worker\\(s\\) 2 left \\(finished or lost\\): from step")))
        << w << " did not re-shard\n"
        << out;
  }
  const double before = Accuracy(undisturbed.output), after = Accuracy(out);
  RecordProperty("accuracy_undisturbed", std::to_string(before));
  RecordProperty("accuracy_after_worker_loss", std::to_string(after));
  EXPECT_GT(before, 80.0) << undisturbed.output;
  // What a user checks: losing a worker costs at most one point (the
  // survivors see the data in another order, so it may also end a point or
  // more better: one run here reached 85.2% against 84.1% undisturbed).
  EXPECT_GE(after, before - 1.0) << out;
}

TEST(Launch, LosingMoreWorkersThanAllowedEndsTheJob) {
  Subprocess job(LaunchCommand(
      {"--ps", "1", "--workers", "2", "--min-workers", "2"},
      {kBin + "/fashion_mnist", "--epochs", "1000", "--train-limit", "512", "--test-limit", "10"}));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const pid_t worker = testing::NewestPid(job.output(), "worker 1");
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  auto code = job.Wait(seconds(10));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 1);
  EXPECT_NE(job.output().find("job failed: worker 1"), std::string::npos) << job.output();
}

// A worker stopped (SIGSTOP) is declared lost and the job finishes without
// it; een-launch then stops it instead of waiting for it forever.
TEST(Launch, AStoppedWorkerDoesNotHoldTheLauncherAtTheEnd) {
  Subprocess job(LaunchCommand(
      {"--ps", "1", "--workers", "2", "--min-workers", "1", "--progress-interval", "200ms"},
      {kBin + "/equivalence_train", "--optimizer", "adam", "--steps", "15000", "--out",
       "/tmp/een-launch-test-stopped-" + std::to_string(getpid())}));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const pid_t worker = testing::NewestPid(job.output(), "worker 1");
  ASSERT_GT(worker, 0) << job.output();
  ASSERT_EQ(kill(worker, SIGSTOP), 0);
  auto code = job.Wait(seconds(120));
  std::filesystem::remove("/tmp/een-launch-test-stopped-" + std::to_string(getpid()));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("worker 1 (pid " + std::to_string(worker) +
                              ") is still running though the coordinator declared it lost and "
                              "finished the job without it; stopping it"),
            std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("1 of 2 workers succeeded"), std::string::npos) << job.output();
  EXPECT_FALSE(testing::ProcessExists(worker));
}

TEST(Launch, CtrlCLeavesNoProcessBehind) {
  Subprocess job(LongJob());
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::vector<pid_t> children = testing::ChildrenOf(job.pid());
  ASSERT_EQ(children.size(), 6u) << "coordinator, c10d store, 2 PS and 2 workers expected";
  job.Signal(SIGINT);
  auto code = job.Wait(seconds(10));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 130);
  for (pid_t c : children) EXPECT_FALSE(testing::ProcessExists(c)) << "pid " << c << " survived";
  EXPECT_NE(job.output().find("interrupted by SIGINT"), std::string::npos) << job.output();
}

TEST(Launch, FailingWorkerFailsTheJobAndSaysWhich) {
  auto r = testing::Run(LaunchCommand({"--ps", "1", "--workers", "2"}, {"false"}), seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("worker [01] \\(pid [0-9]+\\) exited with status 1")))
      << r.output;
}

// A worker that is alive (heartbeats go on) but slow: the job waits for it,
// and the PS name it and the chunk that waits, past the failover threshold.
TEST(Launch, StepWaitingForASlowWorkerNamesItAndTheChunk) {
  auto r = testing::Run(LaunchCommand({"--ps", "2", "--workers", "2"},
                                      {kBin + "/equivalence_train", "--steps", "300", "--out",
                                       "/tmp/een-stall-" + std::to_string(getpid()), "--stall-rank",
                                       "1", "--stall-step", "100", "--stall-ms", "1500"}),
                        seconds(60));
  std::remove(("/tmp/een-stall-" + std::to_string(getpid())).c_str());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("step 100 has waited [0-9]+ ms for the "
                                             "gradients of worker\\(s\\) 1 \\(chunk [0-9]+: "
                                             "tensor '[a-z0-9.]+' elements")))
      << r.output;
  EXPECT_EQ(r.output.find("silent for"), std::string::npos) << "a slow worker is not a lost one";
}

TEST(Launch, WorkerOutsideTheLauncherSaysHowToStartIt) {
  auto r = testing::Run({kBin + "/fashion_mnist"}, seconds(30), {{"EEN_COORDINATOR", ""}});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("een-launch --ps N --workers M"), std::string::npos) << r.output;
}

// Every binary says its version; a typo in EEN_LOG_LEVEL stops een-launch
// before anything starts, naming the valid levels.
TEST(Launch, EveryBinarySaysItsVersionAndABadLogLevelIsRefused) {
  for (const std::string binary :
       {"een-launch", "een-coordinator", "een-ps", "eenctl", "een-bench", "een-bench-worker"}) {
    auto r = testing::Run({kBin + "/" + binary, "--version"}, seconds(10));
    EXPECT_EQ(r.exit_code, 0) << binary << ": " << r.output;
    EXPECT_EQ(r.output.rfind("een ", 0), 0u) << binary << ": " << r.output;
  }
  auto bad = testing::Run(LaunchCommand({"--ps", "1", "--workers", "1"}, {"true"}), seconds(10),
                          {{"EEN_LOG_LEVEL", "verbose"}});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("EEN_LOG_LEVEL 'verbose' is not a log level"), std::string::npos)
      << bad.output;
}

TEST(Launch, BadFlagsNameTheFieldAndTheFix) {
  auto missing_ps =
      testing::Run({kBin + "/een-launch", "--workers", "2", "--", "true"}, seconds(10));
  EXPECT_EQ(missing_ps.exit_code, 2);
  EXPECT_NE(missing_ps.output.find("--ps N is required"), std::string::npos) << missing_ps.output;

  auto no_command =
      testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "1"}, seconds(10));
  EXPECT_EQ(no_command.exit_code, 2);
  EXPECT_NE(no_command.output.find("put the worker command after --"), std::string::npos);

  auto bad_duration = testing::Run(
      LaunchCommand({"--ps", "1", "--workers", "1", "--failover-threshold", "5parsecs"}, {"true"}),
      seconds(10));
  EXPECT_EQ(bad_duration.exit_code, 2);
  EXPECT_NE(bad_duration.output.find("--failover-threshold"), std::string::npos);

  const std::string config = "/tmp/een-launch-test-" + std::to_string(getpid()) + ".yaml";
  std::ofstream(config) << "ps: 2\nworkers: 2\nfailover_treshold: 300ms\n";
  auto bad_config = testing::Run(LaunchCommand({"--config", config}, {"true"}), seconds(10));
  std::remove(config.c_str());
  EXPECT_EQ(bad_config.exit_code, 2);
  EXPECT_NE(bad_config.output.find("field 'failover_treshold' is unknown"), std::string::npos)
      << bad_config.output;

  // A snapshot folder alone keeps nothing: said before the job starts.
  auto folder_alone = testing::Run(
      LaunchCommand({"--ps", "1", "--workers", "1", "--snapshot-dir", "/tmp/een-launch-test-snaps"},
                    {"true"}),
      seconds(60));
  EXPECT_NE(folder_alone.output.find("--snapshot-dir /tmp/een-launch-test-snaps without "
                                     "--snapshot-every N: the job keeps no snapshots"),
            std::string::npos)
      << folder_alone.output;

  auto bad_backend = testing::Run(
      LaunchCommand({"--ps", "1", "--workers", "1", "--backend", "ssh"}, {"true"}), seconds(10));
  EXPECT_EQ(bad_backend.exit_code, 2);
  EXPECT_NE(bad_backend.output.find("--backend ssh is not available; auto (Slurm inside srun, else "
                                    "local), local"),
            std::string::npos)
      << bad_backend.output;
}

}  // namespace
}  // namespace een
