// Training semantics a DDP user assumes, through een-launch with a model of
// the user's kind (tests/semantics_train.cc: embedding, BatchNorm, dropout,
// a frozen layer, an unused layer): buffers and frozen parameters follow
// rank 0, uneven data ends cleanly, a Step() without backward() is refused,
// buffers survive --resume and a PS failover bitwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "support/files.h"
#include "support/job_output.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  }
  return worst;
}

// een-launch's last line (the verdict of a failed job).
std::string LastLine(const std::string& output) {
  size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  size_t begin = output.rfind('\n', end);
  return output.substr(begin == std::string::npos ? 0 : begin + 1, end - begin);
}

class Semantics : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = "/tmp/een-semantics-test-" + std::to_string(getpid());
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
  }
  void TearDown() override { std::filesystem::remove_all(base_); }

  std::vector<std::string> Job(int ps, int workers, const std::string& out,
                               std::vector<std::string> program_flags,
                               std::vector<std::string> launch_flags = {}) {
    std::vector<std::string> argv = {kBin + "/een-launch", "--ps", std::to_string(ps), "--workers",
                                     std::to_string(workers)};
    argv.insert(argv.end(), launch_flags.begin(), launch_flags.end());
    argv.insert(argv.end(), {"--", kBin + "/semantics_train", "--out", base_ + "/" + out});
    argv.insert(argv.end(), program_flags.begin(), program_flags.end());
    return argv;
  }
  std::string Rank(const std::string& out, int rank) {
    return testing::ReadBytes(base_ + "/" + out + ".rank-" + std::to_string(rank) + ".bin");
  }
  std::vector<float> Reference(std::vector<std::string> flags) {
    std::vector<std::string> argv = {kBin + "/semantics_train",
                                     "--reference",
                                     "--no-bn",
                                     "--no-dropout",
                                     "--out",
                                     base_ + "/ref"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = testing::Run(argv, seconds(60));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return testing::Floats(testing::ReadBytes(base_ + "/ref.reference.bin"));
  }
  // `signal`: SIGKILL (een-launch sees it die) or SIGSTOP (it only falls silent).
  // A job of the model without BatchNorm and dropout, where the maths lets
  // it equal the single-process reference; `flags` go to both.
  std::vector<std::string> PlainJob(int ps, int workers, const std::string& out,
                                    const std::vector<std::string>& flags) {
    std::vector<std::string> program = {"--no-bn", "--no-dropout"};
    program.insert(program.end(), flags.begin(), flags.end());
    return Job(ps, workers, out, program);
  }
  // The reference's flags for `workers` workers' batches, with `flags`.
  static std::vector<std::string> ReferenceFlags(int workers,
                                                 const std::vector<std::string>& flags) {
    std::vector<std::string> all = {"--workers", std::to_string(workers)};
    all.insert(all.end(), flags.begin(), flags.end());
    return all;
  }
  void ExpectFailoverChangesNothing(std::vector<std::string> program, int signal = SIGKILL);
  std::string base_;
};

// Every rank builds its model from another seed: parameters, frozen ones
// and BatchNorm buffers must all end bitwise equal to rank 0's.
TEST_F(Semantics, ParametersFrozenLayersAndBuffersFollowRankZero) {
  auto r = testing::Run(Job(2, 3, "bcast", {"--rank-seed", "--steps", "20"}), seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Every PS left by itself: none was stopped as if declared lost.
  EXPECT_EQ(r.output.find("still running though"), std::string::npos) << r.output;
  const std::string zero = Rank("bcast", 0);
  ASSERT_FALSE(zero.empty());
  EXPECT_EQ(Rank("bcast", 1), zero) << "rank 1 differs from rank 0";
  EXPECT_EQ(Rank("bcast", 2), zero) << "rank 2 differs from rank 0";
  // The buffers moved: num_batches_tracked (the last value) counts rank 0's 20 steps.
  const std::vector<float> v = testing::Floats(zero);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.back(), 20.0f);
}

TEST_F(Semantics, AveragedBuffersAreEqualOnEveryRankAndLocalOnesAreNot) {
  auto avg =
      testing::Run(Job(1, 2, "avg", {"--steps", "10", "--buffers", "average"}), seconds(120));
  ASSERT_EQ(avg.exit_code, 0) << avg.output;
  ASSERT_FALSE(Rank("avg", 0).empty());
  EXPECT_EQ(Rank("avg", 1), Rank("avg", 0));
  auto local =
      testing::Run(Job(1, 2, "local", {"--steps", "10", "--buffers", "local"}), seconds(120));
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const auto a = testing::Floats(Rank("local", 0)), b = testing::Floats(Rank("local", 1));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_NE(a, b) << "each rank's own BatchNorm statistics should differ";
}

// SGD, no BatchNorm, no dropout: 4 workers of batch b equal one process with
// batch 4b (embedding, frozen and unused layers included).
TEST_F(Semantics, MatchesOneProcessWithTheGlobalBatch) {
  auto r =
      testing::Run(Job(2, 4, "even", {"--no-bn", "--no-dropout", "--steps", "25"}), seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto reference = Reference({"--workers", "4", "--steps", "25"});
  ASSERT_FALSE(reference.empty());
  const double diff = MaxAbsDifference(testing::Floats(Rank("even", 0)), reference);
  RecordProperty("max_abs_difference", std::to_string(diff));
  EXPECT_LE(diff, 1e-5);
}

// Rank 1 runs out of data after 12 of 30 steps: it leaves, the others
// finish without waiting for it, and the result is DDP's join(): from step
// 12 on, the mean over the workers still training.
TEST_F(Semantics, UnevenInputsFinishCleanlyWithTheExpectedParameters) {
  const std::vector<std::string> flags = {
      "--no-bn", "--no-dropout", "--steps", "30", "--short-rank", "1", "--short-steps", "12"};
  std::vector<std::string> program = flags;
  auto r = testing::Run(Job(2, 3, "uneven", program, {"--failover-threshold", "2s"}), seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 done after step 12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 done after step 30"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("worker 1 finished at step 12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the 2 worker(s) still training (0,2) go on without those that "
                          "finished"),
            std::string::npos)
      << r.output;
  std::vector<std::string> ref_flags = {"--workers", "3"};
  ref_flags.insert(ref_flags.end(), flags.begin() + 2, flags.end());
  const auto reference = Reference(ref_flags);
  ASSERT_FALSE(reference.empty());
  EXPECT_LE(MaxAbsDifference(testing::Floats(Rank("uneven", 0)), reference), 1e-5);
  EXPECT_EQ(Rank("uneven", 2), Rank("uneven", 0));
}

// Every worker finishing at the last step is a normal end, not a change of
// membership: nothing says the others go on without one, nor re-shards.
// (The moment allowed between the finishes is 2 heartbeats: 2 s here, for
// a busy machine.)
TEST_F(Semantics, ANormalEndIsNoMembershipChange) {
  auto r = testing::Run(Job(2, 3, "normal", {"--no-bn", "--no-dropout", "--steps", "20"},
                            {"--heartbeat-interval", "1s", "--failover-threshold", "5s"}),
                        seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("worker 1 finished at step 20"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("membership"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("go on without"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("left the job"), std::string::npos) << r.output;
}

// The same when the short rank's process just exits 0 (no Finish()): een-launch
// tells the coordinator, which lets it leave like a finished one.
TEST_F(Semantics, AWorkerThatExitsZeroLeavesLikeAFinishedOne) {
  const std::vector<std::string> flags = {
      "--no-bn", "--no-dropout", "--steps", "30", "--short-rank", "1", "--short-steps", "12"};
  std::vector<std::string> program = flags;
  program.push_back("--short-exits");
  auto r = testing::Run(Job(2, 3, "exits", program, {"--failover-threshold", "5s"}), seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("worker 1 exited (status 0) without Finish()"), std::string::npos)
      << r.output;
  std::vector<std::string> ref_flags = {"--workers", "3"};
  ref_flags.insert(ref_flags.end(), flags.begin() + 2, flags.end());
  const auto reference = Reference(ref_flags);
  ASSERT_FALSE(reference.empty());
  EXPECT_LE(MaxAbsDifference(testing::Floats(Rank("exits", 0)), reference), 1e-5);
}

// A learning-rate schedule set with set_learning_rate() equals torch's StepLR
// on the same gradients, momentum included.
TEST_F(Semantics, LearningRateScheduleEqualsTorchs) {
  const std::vector<std::string> flags = {"--steps", "35", "--schedule", "--momentum", "0.9"};
  auto r = testing::Run(PlainJob(2, 2, "schedule", flags), seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> ref_flags = ReferenceFlags(2, flags);
  const auto reference = Reference(ref_flags);
  ASSERT_FALSE(reference.empty());
  const double diff = MaxAbsDifference(testing::Floats(Rank("schedule", 0)), reference);
  RecordProperty("max_abs_difference", std::to_string(diff));
  EXPECT_LE(diff, 1e-5);
  // Without the schedule the result is another one: the schedule took effect.
  ref_flags.erase(std::find(ref_flags.begin(), ref_flags.end(), "--schedule"));
  EXPECT_GT(MaxAbsDifference(Reference(ref_flags), reference), 1e-3);
}

// Server-side clipping (global norm over every PS) with a schedule and
// momentum equals torch's clip_grad_norm_ on the same mean gradients; on
// 3 PS and 3 workers, so the norm really is a sum of three shares.
TEST_F(Semantics, ServerClippingEqualsTorchsClipGradNorm) {
  const std::vector<std::string> flags = {"--steps",    "30",         "--clip", "0.2",
                                          "--schedule", "--momentum", "0.9"};
  auto r = testing::Run(PlainJob(3, 3, "clip", flags), seconds(180));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("rank 0 clipped (\\d+) steps")))
      << r.output;
  EXPECT_GE(std::stoi(m[1]), 5) << "max norm 0.2 clipped too few steps to test anything";
  std::vector<std::string> ref_flags = ReferenceFlags(3, flags);
  const auto reference = Reference(ref_flags);
  ASSERT_FALSE(reference.empty());
  const auto job = testing::Floats(Rank("clip", 0));
  double worst = 0;  // relative, as the issue asks (1e-6 of each value, 1e-6 absolute floor)
  for (size_t i = 0; i < job.size() && i < reference.size(); ++i) {
    worst = std::max(worst, std::abs(double(job[i]) - reference[i]) /
                                std::max(1e-1, std::abs(double(reference[i]))));
  }
  RecordProperty("max_relative_difference", std::to_string(worst));
  EXPECT_EQ(job.size(), reference.size());
  EXPECT_LE(worst, 1e-6);  // measured: 4.1e-7 (4.1e-8 absolute) after 30 steps
  EXPECT_EQ(Rank("clip", 1), Rank("clip", 0));
  // Without clipping the result is another one: the clipping took effect.
  const auto at = std::find(ref_flags.begin(), ref_flags.end(), "--clip");
  ref_flags.erase(at, at + 2);
  EXPECT_GT(MaxAbsDifference(Reference(ref_flags), reference), 1e-3);
}

// EEN_LOCAL=1 runs a training program by hand, without een-launch: it
// trains alone as rank 0 of 1, with the same optimizer, clipping, schedule
// and accumulation as a job, equal to plain torch on the same batches; and
// the checks of a job's Step() still hold there.
TEST_F(Semantics, LocalModeTrainsInProcessLikeTorch) {
  const std::vector<std::string> flags = {"--steps",    "20",  "--clip",       "0.2", "--schedule",
                                          "--momentum", "0.9", "--accumulate", "2"};
  std::vector<std::string> argv = {kBin + "/semantics_train", "--out", base_ + "/local", "--no-bn",
                                   "--no-dropout"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto r = testing::Run(argv, seconds(60), {{"EEN_LOCAL", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("EEN_LOCAL=1: training in this process alone"), std::string::npos)
      << r.output;
  const auto reference = Reference(ReferenceFlags(1, flags));
  ASSERT_FALSE(reference.empty());
  EXPECT_LE(MaxAbsDifference(testing::Floats(Rank("local", 0)), reference), 1e-5);

  auto clip = testing::Run(
      {kBin + "/semantics_train", "--out", base_ + "/bad", "--steps", "2", "--clip-after-backward"},
      seconds(60), {{"EEN_LOCAL", "1"}});
  EXPECT_EQ(clip.exit_code, 1);
  EXPECT_NE(clip.output.find("changed between backward() and Step()"), std::string::npos)
      << clip.output;
  auto unset = testing::Run({kBin + "/semantics_train", "--out", base_ + "/bad", "--steps", "2"},
                            seconds(60), {{"EEN_LOCAL", ""}});
  EXPECT_EQ(unset.exit_code, 1);
  EXPECT_NE(unset.output.find("not part of an EEN job"), std::string::npos) << unset.output;
  EXPECT_NE(unset.output.find("EEN_LOCAL=1"), std::string::npos) << unset.output;
}

// A NaN gradient is never applied (every rank's parameters would turn NaN,
// silently): the PS keeps the step unpublished, and the job ends naming the
// worker, the tensor and the step; under every consistency mode, and with
// clipping.
TEST_F(Semantics, ANanGradientIsNeverAppliedAndTheJobEndsNamingWorkerTensorAndStep) {
  const std::regex said(
      "job failed: ps [01]: worker 0's gradient of step 3 for tensor '[a-z0-9_.]+' \\(element "
      "[0-9]+\\) is NaN or infinite: not applied, and the job ends");
  using Flags = std::vector<std::string>;
  for (const auto& [launch, extra] :
       std::vector<std::pair<Flags, Flags>>{{{}, {}},
                                            {{}, {"--clip", "0.2"}},  // (clipping is bsp's only)
                                            {{"--consistency", "ssp:2"}, {}},
                                            {{"--consistency", "async"}, {}}}) {
    Flags flags = {"--steps", "10", "--nan-at", "3"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto r = testing::Run(Job(2, 2, "nan", flags, launch), seconds(60));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(std::regex_search(LastLine(r.output), said)) << r.output;
  }
}

// The progress line shows the loss the program gave, NaN as nan (not as
// 0.0000, which looks like a perfect model).
TEST_F(Semantics, ANanLossShowsAsNanOnTheProgressLine) {
  auto r = testing::Run(Job(1, 1, "nanloss", {"--steps", "3000", "--report-nan-loss"},
                            {"--progress-interval", "50ms"}),
                        seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| loss nan |"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("| loss 0.0000 |"), std::string::npos) << r.output;
}

// A worker hung in its own code (heartbeats on, no gradients) does not hang
// the job: the others' step times out, and the verdict names that worker.
TEST_F(Semantics, AHungWorkerEndsTheJobAfterTheStepTimeoutNamingIt) {
  auto r =
      testing::Run(Job(1, 2, "hung", {"--steps", "200", "--stall-rank", "1", "--stall-at", "5"},
                       {"--step-timeout", "3s"}),
                   seconds(90));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 hangs at step 5"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(LastLine(r.output),
                                std::regex("not ready within the step timeout \\(3 s, een-launch "
                                           "--step-timeout\\): step 5 still waits for the "
                                           "gradients of worker\\(s\\) 1")))
      << r.output;
}

// Three backward passes per step under no_sync() equal one batch three
// times as large.
TEST_F(Semantics, AccumulationEqualsOneBigBatch) {
  const std::vector<std::string> flags = {"--steps", "15", "--accumulate", "3"};
  auto r = testing::Run(PlainJob(2, 2, "accumulate", flags), seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto reference = Reference(ReferenceFlags(2, flags));
  ASSERT_FALSE(reference.empty());
  EXPECT_LE(MaxAbsDifference(testing::Floats(Rank("accumulate", 0)), reference), 1e-5);
}

// Clipping .grad after backward() cannot take effect (it was pushed): an
// error that says what to use instead, never a silent no-op.
TEST_F(Semantics, ChangingGradAfterBackwardIsAnError) {
  auto r = testing::Run(Job(1, 2, "clip", {"--steps", "3", "--clip-after-backward"}), seconds(60));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(LastLine(r.output).find("changed between backward() and Step() "
                                    "(torch::nn::utils::clip_grad_norm_"),
            std::string::npos)
      << r.output;
}

TEST_F(Semantics, StepWithoutBackwardIsRefusedWithAMessage) {
  auto r = testing::Run(Job(1, 2, "nobackward", {"--steps", "5", "--skip-backward-at", "3"}),
                        seconds(120));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Step() at step 3 without a backward()"), std::string::npos) << r.output;
}

// BatchNorm buffers are part of the snapshot: a killed job resumed from it
// ends bitwise where the uninterrupted one does.
TEST_F(Semantics, BuffersSurviveResumeBitwise) {
  const std::vector<std::string> program = {"--no-dropout", "--steps", "1500"};
  auto whole = testing::Run(
      Job(2, 2, "whole", program, {"--snapshot-every", "100", "--snapshot-dir", base_ + "/w"}),
      seconds(180));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string dir = base_ + "/snapshots";
  {
    testing::Subprocess job(
        Job(2, 2, "resumed", program, {"--snapshot-every", "100", "--snapshot-dir", dir}));
    ASSERT_TRUE(job.WaitForCompleteSnapshot(300, seconds(120))) << job.output();
    job.Signal(SIGKILL);
    ASSERT_TRUE(job.Wait(seconds(10)).has_value());
  }
  ASSERT_TRUE(Rank("resumed", 0).empty()) << "the kill came too late";
  auto resumed = testing::Run(
      Job(2, 2, "resumed", program, {"--snapshot-every", "100", "--resume", dir}), seconds(180));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from the snapshot of step"), std::string::npos)
      << resumed.output;
  ASSERT_FALSE(Rank("whole", 0).empty());
  EXPECT_EQ(Rank("resumed", 0), Rank("whole", 0)) << "parameters or buffers differ after resume";
  EXPECT_EQ(Rank("resumed", 1), Rank("whole", 1));
}

// With --replicas 2 a killed PS's backups hold the buffers too.
// With replicas 2 a PS killed mid-training changes nothing: the job ends as
// the undisturbed one does, bitwise.
void Semantics::ExpectFailoverChangesNothing(std::vector<std::string> program, int signal) {
  const std::vector<std::string> launch = {"--replicas", "2", "--progress-interval", "200ms"};
  auto whole = testing::Run(Job(3, 2, "whole", program, launch), seconds(180));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  testing::Subprocess job(Job(3, 2, "killed", program, launch));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::this_thread::sleep_for(milliseconds(500));
  const pid_t ps = testing::NewestPid(job.output(), "ps 1");
  ASSERT_GT(ps, 0) << job.output();
  const size_t mark = job.output().size();
  ASSERT_EQ(kill(ps, signal), 0);
  ASSERT_TRUE(job.WaitForOutput("failing over: its", seconds(30), mark)) << job.output();
  auto code = job.Wait(seconds(180));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  ASSERT_FALSE(Rank("whole", 0).empty());
  EXPECT_EQ(Rank("killed", 0), Rank("whole", 0)) << "parameters or buffers differ after failover";
}

TEST_F(Semantics, BuffersSurviveAPsFailoverBitwise) {
  ExpectFailoverChangesNothing({"--no-dropout", "--steps", "3000"});
}

// Clipped steps too: a promoted backup knows the norm its primary clipped with.
TEST_F(Semantics, ClippedStepsSurviveAPsFailoverBitwise) {
  ExpectFailoverChangesNothing({"--no-dropout", "--steps", "2000", "--clip", "0.2"});
}

// A PS that only falls silent (SIGSTOP) stays in the map, owning nothing:
// the norm exchange skips it, and the job ends without waiting for it.
TEST_F(Semantics, ClippedStepsSurviveASilentPsBitwise) {
  ExpectFailoverChangesNothing({"--no-dropout", "--steps", "2000", "--clip", "0.2"}, SIGSTOP);
}
// (een-launch then stops the silent PS once the coordinator has finished:
// "ps 1 (pid N) is still running though the coordinator declared it lost".)

// The last line names the real cause of a failed job, never a process that
// only stopped because of it.
TEST_F(Semantics, VerdictsNameTheRealCause) {
  auto no_program = testing::Run(
      {kBin + "/een-launch", "--ps", "1", "--workers", "2", "--", "/bin/true"}, seconds(60));
  EXPECT_EQ(no_program.exit_code, 1);
  EXPECT_TRUE(std::regex_search(LastLine(no_program.output),
                                std::regex("^\\[een-launch\\] job failed: worker [01] \\(pid "
                                           "[0-9]+\\) exited with status 0 without joining the "
                                           "job")))
      << no_program.output;

  auto never = testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "2",
                             "--startup-timeout", "2s", "--", "sleep", "60"},
                            seconds(60));
  EXPECT_EQ(never.exit_code, 1);
  EXPECT_NE(LastLine(never.output)
                .find("job failed: job did not start within 2000 ms "
                      "(--startup-timeout): worker 0 and 1 never registered"),
            std::string::npos)
      << never.output;

  auto mismatch = testing::Run(Job(1, 3, "mismatch", {"--mismatch-rank", "1"}), seconds(60));
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_NE(LastLine(mismatch.output)
                .find("job failed: model mismatch at tensor 1: worker 0 and worker 2 have "
                      "parameter 'fc1.weight' of shape [32, 20]; worker 1 has parameter "
                      "'fc1.weight' of shape [33, 20]"),
            std::string::npos)
      << mismatch.output;

  auto no_backward =
      testing::Run(Job(1, 2, "nb", {"--steps", "5", "--skip-backward-at", "3"}), seconds(60));
  EXPECT_EQ(no_backward.exit_code, 1);
  EXPECT_NE(LastLine(no_backward.output).find("Step() at step 3 without a backward()"),
            std::string::npos)
      << no_backward.output;

  auto no_ps = testing::Run({kBin + "/een-launch", "--ps", "-1", "--workers", "2", "--", "true"},
                            seconds(10));
  EXPECT_EQ(no_ps.exit_code, 2);
  EXPECT_NE(no_ps.output.find("--ps must be at least 0"), std::string::npos) << no_ps.output;
}

// A worker's own lines (printf, std::cout) reach the launcher as they are
// written, whole, even if the job is then interrupted.
TEST_F(Semantics, WorkerOutputShowsUpLineByLine) {
  testing::Subprocess job({kBin + "/een-launch", "--ps", "1", "--workers", "1", "--startup-timeout",
                           "60s", "--", "sh", "-c",
                           "printf 'epoch 1 '; sleep 0.3; printf 'done\\n'; exec " + kBin +
                               "/semantics_train --out /dev/null --print-and-wait"});
  ASSERT_TRUE(job.WaitForOutput("[worker 0] epoch 2\n", seconds(30))) << job.output();
  EXPECT_NE(job.output().find("[worker 0] epoch 1 done\n"), std::string::npos) << job.output();
  job.Signal(SIGINT);
  auto code = job.Wait(seconds(10));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 130);
}

}  // namespace
}  // namespace een
