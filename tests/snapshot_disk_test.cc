// Snapshots on a disk that fills up: a job whose snapshot folder is a tmpfs
// (mounted here; skipped where mounting is not allowed) that another file
// fills keeps training, each PS says once what failed, snapshots are written
// again once there is room, and --resume takes the newest snapshot that was
// complete, even from a disk still full. A folder that takes no files is
// refused before the job starts, and so is one holding an earlier run's
// snapshots (without --resume).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>

#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

// The newest "snapshot of step N complete" the job's log names (0: none).
uint64_t NewestComplete(const std::string& output) {
  uint64_t newest = 0;
  const std::regex complete("snapshot of step ([0-9]+) complete");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), complete);
       it != std::sregex_iterator(); ++it) {
    newest = std::max<uint64_t>(newest, std::stoull((*it)[1]));
  }
  return newest;
}

class SnapshotDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    // 3 tensors, 196 K floats: 400 KB per PS per snapshot.
    std::ofstream trace(base_ / "small.trace");
    trace << "# een trace v1: small\n";
    for (int i = 2; i >= 0; --i) trace << "layer" << i << ".weight\t" << 65536 << "\n";
    std::filesystem::create_directories(snaps_);
    if (mount("tmpfs", snaps_.c_str(), "tmpfs", 0, "size=16m,mode=0700") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs at " << snaps_ << " (" << std::strerror(errno)
                   << "): this test needs root";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(snaps_.c_str(), MNT_DETACH);
  }
  // Another program fills the disk, leaving `leave` bytes free.
  void Fill(uint64_t leave) {
    struct statvfs fs {};
    ASSERT_EQ(statvfs(snaps_.c_str(), &fs), 0);
    const uint64_t free = uint64_t{fs.f_bavail} * fs.f_frsize;
    std::ofstream ballast(ballast_, std::ios::binary | std::ios::trunc);
    const std::string mib(1 << 20, 'b');
    uint64_t left = free > leave ? free - leave : 0;
    for (; left >= mib.size() && ballast; left -= mib.size()) ballast.write(mib.data(), mib.size());
    if (ballast && left > 0) ballast.write(mib.data(), static_cast<std::streamsize>(left));
    ballast.close();  // a write beyond the end fails: full is full
  }
  std::vector<std::string> Job(std::vector<std::string> flags, int steps) const {
    std::vector<std::string> argv = {kBin + "/een-launch",  "--ps", "2", "--workers", "2",
                                     "--progress-interval", "200ms"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", kBin + "/een-bench-worker", base_ / "small.trace", "--steps",
                             std::to_string(steps), "--warmup", "0", "--compute-ms", "10",
                             "--report", base_.path()});
    return argv;
  }
  static bool BothPsSaid(const std::string& out, const std::string& what) {
    return std::regex_search(out, std::regex("\\[ps 0\\][^\n]*" + what)) &&
           std::regex_search(out, std::regex("\\[ps 1\\][^\n]*" + what));
  }
  testing::ScratchFolder base_{"snapshot-disk-test"};
  const std::string snaps_ = base_ / "snaps";
  const std::string ballast_ = snaps_ + "/ballast";
  bool mounted_ = false;
};

TEST_F(SnapshotDisk, AFullDiskIsSaidOnceTrainingGoesOnAndResumeFindsTheNewest) {
  testing::Subprocess job(Job({"--snapshot-every", "5", "--snapshot-dir", snaps_}, 1500));
  ASSERT_TRUE(job.WaitForCompleteSnapshot(5, seconds(120))) << job.output();
  Fill(256 << 10);
  ASSERT_TRUE(job.WaitUntil([](const std::string& out) { return BothPsSaid(out, "not written"); },
                            seconds(120)))
      << job.output();
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60), job.output().size()))
      << "training stopped when the disk filled\n"
      << job.output();
  const uint64_t while_full = NewestComplete(job.output());
  std::filesystem::remove(ballast_);  // room again: the next snapshots are written
  ASSERT_TRUE(job.WaitUntil(
      [](const std::string& out) { return BothPsSaid(out, "snapshots are written again"); },
      seconds(120)))
      << job.output();
  auto code = job.Wait(seconds(240));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  const std::string out = job.output();
  for (const char* ps : {"ps 0", "ps 1"}) {
    const std::regex failure("\\[" + std::string(ps) + "\\][^\n]*not written");
    const auto failures = std::distance(std::sregex_iterator(out.begin(), out.end(), failure),
                                        std::sregex_iterator());
    EXPECT_EQ(failures, 1) << ps << " did not say it exactly once\n" << out;
  }
  EXPECT_NE(out.find("disk full ("), std::string::npos) << out;
  EXPECT_NE(out.find("free space in, or fix,"), std::string::npos) << out;
  const uint64_t newest = NewestComplete(out);
  EXPECT_GT(newest, while_full) << out;

  auto resumed = testing::Run(Job({"--resume", snaps_}, 1520), seconds(240));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from the snapshot of step " + std::to_string(newest)),
            std::string::npos)
      << "newest complete: " << newest << "\n"
      << resumed.output;
}

TEST_F(SnapshotDisk, AJobResumesFromADiskThatIsStillFull) {
  testing::Subprocess job(Job({"--snapshot-every", "5", "--snapshot-dir", snaps_}, 300));
  ASSERT_TRUE(job.WaitForCompleteSnapshot(5, seconds(120))) << job.output();
  Fill(0);
  auto code = job.Wait(seconds(240));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  EXPECT_TRUE(BothPsSaid(job.output(), "not written")) << job.output();
  const uint64_t newest = NewestComplete(job.output());
  // Still full: the resumed PS read their snapshots without room to write.
  auto resumed = testing::Run(Job({"--resume", snaps_}, 320), seconds(240));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from the snapshot of step " + std::to_string(newest)),
            std::string::npos)
      << "newest complete: " << newest << "\n"
      << resumed.output;
}

TEST(SnapshotFolder, OneThatTakesNoFilesIsRefusedBeforeTheJobStarts) {
  testing::ScratchFolder base("snapshot-folder-test");
  std::ofstream(base / "a-file") << "not a folder";
  auto r = testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "1", "--snapshot-every",
                         "5", "--snapshot-dir", base / "a-file/snaps", "--", "/bin/true"},
                        seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("snapshot folder " + base / "a-file/snaps" + " is not writable"),
            std::string::npos)
      << r.output;
  auto resume = testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "1", "--resume",
                              base / "missing", "--", "/bin/true"},
                             seconds(30));
  EXPECT_EQ(resume.exit_code, 2) << resume.output;
  EXPECT_NE(resume.output.find("--resume: Directory does not exist"), std::string::npos)
      << resume.output;
  // One holding an earlier run's snapshots: a new job would mix its own in.
  std::filesystem::create_directories(base / "earlier/ps-0");
  std::ofstream(base / "earlier/ps-0/CURRENT") << "MANIFEST-000001\n";
  auto earlier =
      testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "1", "--snapshot-every", "5",
                    "--snapshot-dir", base / "earlier", "--", "/bin/true"},
                   seconds(30));
  EXPECT_EQ(earlier.exit_code, 2) << earlier.output;
  EXPECT_NE(earlier.output.find("holds the snapshots of an earlier run"), std::string::npos)
      << earlier.output;
  EXPECT_NE(earlier.output.find("--resume " + base / "earlier"), std::string::npos)
      << earlier.output;
}

}  // namespace
}  // namespace een
