// Snapshots through een-launch: kill a whole job mid-run, resume it, and get
// bitwise the parameters of an uninterrupted run; a corrupted newest
// snapshot is refused with a message and the previous complete one is used.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "support/coverage_records.h"
#include "support/files.h"
#include "support/job_output.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;
constexpr const char* kSteps = "2000";

std::vector<std::string> Job(const std::string& out, std::vector<std::string> flags) {
  std::vector<std::string> argv = {kBin + "/een-launch", "--ps", "2", "--workers", "2"};
  if (std::find(flags.begin(), flags.end(), "--snapshot-every") == flags.end()) {
    flags.insert(flags.end(), {"--snapshot-every", "100"});
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const char* a : {"--", "PROGRAM", "--optimizer", "adam", "--steps", kSteps, "--out"}) {
    argv.push_back(a);
  }
  argv[argv.size() - 6] = kBin + "/equivalence_train";
  argv.push_back(out);
  return argv;
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = "/tmp/een-resume-test-" + std::to_string(getpid());
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
  }
  void TearDown() override { std::filesystem::remove_all(base_); }
  std::string base_;
};

TEST_F(Resume, KilledJobResumesToBitwiseTheSameParameters) {
  // The uninterrupted run.
  auto whole =
      testing::Run(Job(base_ + "/whole.bin", {"--snapshot-dir", base_ + "/whole"}), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string expected = testing::ReadBytes(base_ + "/whole.bin");
  ASSERT_FALSE(expected.empty());

  // The same job, killed whole (launcher SIGKILL: every role dies with it).
  const std::string dir = base_ + "/snapshots";
  {
    testing::Subprocess job(Job(base_ + "/resumed.bin", {"--snapshot-dir", dir}));
    ASSERT_TRUE(job.WaitForCompleteSnapshot(500, seconds(120))) << job.output();
    job.Signal(SIGKILL);
    ASSERT_TRUE(job.Wait(seconds(10)).has_value());
  }
  ASSERT_FALSE(std::filesystem::exists(base_ + "/resumed.bin")) << "the kill came too late";

  auto resumed = testing::Run(Job(base_ + "/resumed.bin", {"--resume", dir}), seconds(120));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(resumed.output, m,
                                std::regex("resuming from the snapshot of step ([0-9]+)")))
      << resumed.output;
  EXPECT_GE(std::stoi(m[1]), 500);
  EXPECT_EQ(testing::ReadBytes(base_ + "/resumed.bin"), expected) << "resumed parameters differ";

  // Corrupt the newest snapshot of PS 0: resume refuses it, uses the previous one.
  auto hit = testing::Run({kBin + "/corrupt_snapshot", dir + "/ps-0"}, seconds(30));
  ASSERT_EQ(hit.exit_code, 0) << hit.output;
  std::filesystem::remove(base_ + "/resumed.bin");
  auto again = testing::Run(Job(base_ + "/resumed.bin", {"--resume", dir}), seconds(120));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("refusing a snapshot"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("does not match its checksum"), std::string::npos);
  // The one before (2000's, or 1900's when a busy machine skipped the last periodic one).
  std::smatch fallback;
  ASSERT_TRUE(std::regex_search(
      again.output, fallback,
      std::regex("the snapshot of step ([0-9]+) is not intact on every PS; using step ([0-9]+)")))
      << again.output;
  EXPECT_LT(std::stoull(fallback[2]), std::stoull(fallback[1])) << again.output;
  EXPECT_EQ(testing::ReadBytes(base_ + "/resumed.bin"), expected)
      << "parameters after the fallback differ";
}

// A worker was lost before the snapshot: the resumed job (every worker live
// again) must start each worker where the data really stood, which depends
// on when the loss took effect; the coordinator keeps that history next to
// the snapshots. Checked on the samples each process trained on.
TEST_F(Resume, AfterAWorkerLossTheDataPositionIsKept) {
  constexpr int kSamples = 20000, kBatch = 4;
  const std::string dir = base_ + "/snapshots", run1 = base_ + "/run1", run2 = base_ + "/run2";
  std::filesystem::create_directories(run1);
  std::filesystem::create_directories(run2);
  auto job = [&](const std::string& record, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {kBin + "/een-launch",
                                     "--ps",
                                     "2",
                                     "--workers",
                                     "3",
                                     "--min-workers",
                                     "2",
                                     "--snapshot-every",
                                     "200",
                                     "--progress-interval",
                                     "200ms"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const std::string& a :
         {std::string("--"), kBin + "/coverage_train", std::string("--record"), record,
          std::string("--samples"), std::to_string(kSamples), std::string("--batch"),
          std::to_string(kBatch)}) {
      argv.push_back(a);
    }
    return argv;
  };
  uint64_t loss_step = 0;
  {
    testing::Subprocess first(job(run1, {"--snapshot-dir", dir}));
    ASSERT_TRUE(first.WaitForOutput("progress: step", seconds(120))) << first.output();
    const pid_t victim = testing::NewestPid(first.output(), "worker 1");
    ASSERT_GT(victim, 0);
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    ASSERT_TRUE(first.WaitForOutput("membership 1: from step", seconds(20))) << first.output();
    std::smatch m;
    std::string out = first.output();
    ASSERT_TRUE(std::regex_search(out, m, std::regex("membership 1: from step ([0-9]+)")));
    loss_step = std::stoull(m[1]);
    // A snapshot of a step after the loss took effect, complete, then the
    // whole job dies. (One of an earlier step may complete after the loss
    // was logged, on a busy machine: wait past it.)
    size_t from = first.output().size();
    for (uint64_t snapshot = 0; snapshot <= loss_step;) {
      ASSERT_TRUE(first.WaitForOutput("complete on all 2 PS", seconds(30), from)) << first.output();
      const std::string text = first.output().substr(from);
      std::smatch s;
      ASSERT_TRUE(
          std::regex_search(text, s, std::regex("snapshot of step ([0-9]+) complete on all 2 PS")))
          << text;
      snapshot = std::stoull(s[1]);
      from += static_cast<size_t>(s.position(0) + s.length(0));
    }
    first.Signal(SIGKILL);
    ASSERT_TRUE(first.Wait(seconds(10)).has_value());
  }
  auto resumed = testing::Run(job(run2, {"--resume", dir}), seconds(120));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(resumed.output, m,
                                std::regex("resuming from the snapshot of step ([0-9]+)")));
  const uint64_t resume_step = std::stoull(m[1]);
  ASSERT_GT(resume_step, loss_step) << resumed.output;
  // What counts: the first run's steps before the snapshot, the second's after.
  int files = 0;
  testing::Record before = testing::ReadRecords(run1, &files),
                  after = testing::ReadRecords(run2, &files);
  testing::Record all;
  for (auto& [epoch, steps] : before) {
    for (auto& [step, idx] : steps) {
      if (step < resume_step) all[epoch][step] = idx;
    }
  }
  for (auto& [epoch, steps] : after) {
    for (auto& [step, idx] : steps) {
      if (step >= resume_step)
        all[epoch][step].insert(all[epoch][step].end(), idx.begin(), idx.end());
    }
  }
  ASSERT_EQ(all.size(), 2u);
  for (const auto& [epoch, by_step] : all) {
    const int distinct = testing::DistinctSamples(by_step, epoch);
    EXPECT_GE(distinct, kSamples - 2 * kBatch) << "epoch " << epoch << " left samples untrained";
  }
}

// `eenctl snapshot`: one snapshot at a step agreed with every PS, besides
// the periodic ones (here: practically never); the job resumes from it
// bitwise. Asking a job without snapshots is refused with the reason.
TEST_F(Resume, OnDemandSnapshotIsCompleteAndResumable) {
  auto whole = testing::Run(Job(base_ + "/whole.bin", {"--snapshot-dir", base_ + "/whole",
                                                       "--snapshot-every", "1000000"}),
                            seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string dir = base_ + "/snapshots";
  {
    std::vector<std::string> argv =
        Job(base_ + "/resumed.bin",
            {"--snapshot-dir", dir, "--snapshot-every", "1000000", "--progress-interval", "200ms"});
    testing::Subprocess job(argv);
    ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(120))) << job.output();
    const std::string coordinator = testing::CoordinatorAddress(job.output());
    ASSERT_FALSE(coordinator.empty()) << job.output();
    auto asked =
        testing::Run({kBin + "/eenctl", "snapshot", "--coordinator", coordinator}, seconds(30));
    std::smatch m;
    ASSERT_EQ(asked.exit_code, 0) << asked.output;
    ASSERT_TRUE(std::regex_search(asked.output, m, std::regex("every PS snapshots step ([0-9]+)")))
        << asked.output;
    const std::string step = m[1];
    ASSERT_TRUE(
        job.WaitForOutput("snapshot of step " + step + " complete on all 2 PS", seconds(30)))
        << job.output();
    job.Signal(SIGKILL);
    ASSERT_TRUE(job.Wait(seconds(10)).has_value());
  }
  auto resumed = testing::Run(
      Job(base_ + "/resumed.bin", {"--resume", dir, "--snapshot-every", "1000000"}), seconds(120));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::ReadBytes(base_ + "/resumed.bin"), testing::ReadBytes(base_ + "/whole.bin"));

  // A job without snapshots says why it cannot.
  testing::Subprocess plain({kBin + "/een-launch", "--ps", "1", "--workers", "1",
                             "--progress-interval", "200ms", "--", kBin + "/equivalence_train",
                             "--steps", "100000", "--out", base_ + "/plain.bin"});
  ASSERT_TRUE(plain.WaitForOutput("progress: step", seconds(120))) << plain.output();
  const std::string coordinator = testing::CoordinatorAddress(plain.output());
  ASSERT_FALSE(coordinator.empty()) << plain.output();
  auto refused =
      testing::Run({kBin + "/eenctl", "snapshot", "--coordinator", coordinator}, seconds(30));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find("keeps no snapshots"), std::string::npos) << refused.output;
  plain.Signal(SIGINT);
  EXPECT_TRUE(plain.Wait(seconds(20)).has_value());
}

// A new run in a folder that holds an earlier run's snapshots would mix its
// snapshots with the old ones (the newest few are kept), and a later
// --resume could take the old run's model: it is refused, and the earlier
// run stays resumable. Resuming with more PS than took the snapshots names
// the --ps to use.
TEST_F(Resume, AnEarlierRunsFolderIsNeitherMixedNorResumedWithOtherPs) {
  const std::string dir = base_ + "/earlier";
  auto earlier = testing::Run(Job(base_ + "/earlier.bin", {"--snapshot-dir", dir}), seconds(120));
  ASSERT_EQ(earlier.exit_code, 0) << earlier.output;

  // Refused before anything starts (een-launch looks in the folder).
  auto fresh = testing::Run(Job(base_ + "/fresh.bin", {"--snapshot-dir", dir}), seconds(60));
  EXPECT_EQ(fresh.exit_code, 2) << fresh.output;
  EXPECT_NE(fresh.output.find("snapshot folder " + dir + " holds the snapshots of an earlier run"),
            std::string::npos)
      << fresh.output;
  EXPECT_NE(fresh.output.find("go on from them with --resume " + dir), std::string::npos)
      << fresh.output;
  EXPECT_EQ(fresh.output.find("[coordinator]"), std::string::npos) << fresh.output;

  std::vector<std::string> three = Job(base_ + "/three.bin", {"--resume", dir});
  three[2] = "3";  // --ps 3
  auto more = testing::Run(three, seconds(60));
  EXPECT_EQ(more.exit_code, 1) << more.output;
  EXPECT_NE(more.output.find("ps 2 none: " + dir + "/ps-2 holds no snapshot"), std::string::npos)
      << more.output;
  EXPECT_NE(more.output.find("was the run started with --ps 2?"), std::string::npos) << more.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/ps-2")) << "a refused resume leaves no empty store";

  // It goes on from the newest snapshot complete on every PS (on a busy machine the last
  // periodic one may have been skipped while the one before was still being written).
  auto resumed = testing::Run(Job(base_ + "/resumed.bin", {"--resume", dir}), seconds(120));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(resumed.output, m,
                                std::regex("resuming from the snapshot of step ([0-9]+)")))
      << resumed.output;
  uint64_t newest = 0;
  const std::regex complete("snapshot of step ([0-9]+) complete on all 2 PS");
  for (auto it = std::sregex_iterator(earlier.output.begin(), earlier.output.end(), complete);
       it != std::sregex_iterator(); ++it) {
    newest = std::max<uint64_t>(newest, std::stoull((*it)[1]));
  }
  EXPECT_GE(std::stoull(m[1]), newest) << resumed.output;
  EXPECT_GE(std::stoull(m[1]), 100u) << resumed.output;
}

TEST_F(Resume, NothingToResumeFromIsAClearError) {
  std::filesystem::create_directories(base_ + "/empty");
  auto r = testing::Run(Job(base_ + "/x.bin", {"--resume", base_ + "/empty"}), seconds(60));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot resume: no snapshot is complete and intact on every one"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace een
