// Snapshots through een-launch: kill a whole job mid-run, resume it, and get
// bitwise the parameters of an uninterrupted run; a corrupted newest
// snapshot is refused with a message and the previous complete one is used.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "support/files.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;
constexpr const char* kSteps = "2000";

std::vector<std::string> Job(const std::string& out, std::vector<std::string> flags) {
  std::vector<std::string> argv = {kBin + "/een-launch", "--ps", "2", "--workers", "2",
                                   "--snapshot-every", "100"};
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
  auto whole = testing::Run(Job(base_ + "/whole.bin", {"--snapshot-dir", base_ + "/whole"}),
                            seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string expected = testing::ReadBytes(base_ + "/whole.bin");
  ASSERT_FALSE(expected.empty());

  // The same job, killed whole (launcher SIGKILL: every role dies with it).
  const std::string dir = base_ + "/snapshots";
  {
    testing::Subprocess job(Job(base_ + "/resumed.bin", {"--snapshot-dir", dir}));
    ASSERT_TRUE(job.WaitForOutput("snapshot of step 500 complete on all 2 PS", seconds(120)))
        << job.output();
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
  EXPECT_NE(again.output.find("is not intact on every PS; using step 1900"), std::string::npos)
      << again.output;
  EXPECT_EQ(testing::ReadBytes(base_ + "/resumed.bin"), expected) << "parameters after the fallback differ";
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
