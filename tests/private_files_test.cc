// Files een writes cannot be redirected or read by another local user:
// a name planted in a shared folder is never written through, and flight
// records go to a new private folder unless told otherwise. Files it reads
// (the hostfile, here) are regular files of a bounded size, and an error
// about one never quotes it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/private_file.h"
#include "support/files.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode;
}

// Another local user plants a link, where een would write, to a file of
// the user een runs as (root, in the attack that was found).
TEST(PrivateFiles, ANamePlantedByAnotherUserIsNeverWrittenThrough) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to act as a second user with runuser";
  if (std::system("runuser -u nobody -- true") != 0) GTEST_SKIP() << "no runuser or no nobody";
  testing::ScratchFolder base("private-files");
  const std::string shared = base / "shared";  // as /tmp: anyone may add names
  ASSERT_TRUE(std::filesystem::create_directory(shared));
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  ASSERT_EQ(chmod(base.path().c_str(), 0755), 0);
  const std::string victim = base / "victim";
  std::ofstream(victim) << "root's own data";
  const std::string planted = shared + "/een-flight-4242-failed-step-7.json";
  ASSERT_EQ(std::system(("runuser -u nobody -- ln -s " + victim + " " + planted).c_str()), 0);

  const Status s = WriteNewPrivateFile(planted, "a flight record");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exists already"), std::string::npos) << s.message();
  EXPECT_EQ(testing::ReadBytes(victim), "root's own data");

  // A name nobody planted: a new file, its user's only.
  const std::string fresh = shared + "/een-flight-4242-step-7.json";
  ASSERT_TRUE(WriteNewPrivateFile(fresh, "a flight record").ok());
  EXPECT_TRUE(S_ISREG(ModeOf(fresh)));
  EXPECT_EQ(ModeOf(fresh) & 07777, 0600u);
  EXPECT_EQ(testing::ReadBytes(fresh), "a flight record");
}

TEST(PrivateFiles, AFailedJobsFlightRecordIsInANewPrivateFolder) {
  testing::ScratchFolder base("flight-default");
  // Worker 0 is killed once the job trains: the job needs both workers, so
  // it fails, and the coordinator writes its flight record where no
  // --flight-dir (nor EEN_FLIGHT_DIR) says.
  testing::Subprocess job(
      {kBin + "/een-launch", "--ps", "1", "--workers", "2", "--", kBin + "/equivalence_train",
       "--optimizer", "adam", "--steps", "1000000", "--out", base / "params"},
      {{"EEN_FLIGHT_DIR", ""}});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(120))) << job.output();
  std::smatch worker;
  const std::string started = job.output();
  ASSERT_TRUE(std::regex_search(started, worker,
                                std::regex("registered worker 0 \\(host [^,]+, pid ([0-9]+)\\)")))
      << started;
  kill(std::stoi(worker[1]), SIGKILL);
  const auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_NE(*code, 0) << job.output();
  std::smatch m;
  const std::string output = job.output();
  ASSERT_TRUE(
      std::regex_search(output, m,
                        std::regex("flight record of steps [0-9]+-[0-9]+ of every process "
                                   "written to (/tmp/een-flight-[A-Za-z0-9]+)/([^ ]+\\.json)")))
      << output;
  const std::string folder = m[1], file = folder + "/" + std::string(m[2]);
  EXPECT_EQ(ModeOf(folder) & 07777, 0700u);
  EXPECT_TRUE(S_ISREG(ModeOf(file)));
  EXPECT_EQ(ModeOf(file) & 07777, 0600u);
  EXPECT_GT(testing::ReadBytes(file).size(), 100u);
  std::filesystem::remove_all(folder);
}

TEST(InputFiles, AHostfileThatIsASpecialFileOrNoHostfileIsRefusedWithoutQuotingIt) {
  testing::ScratchFolder base("input-files");
  const std::string fifo = base / "fifo", shadow = base / "shadow", big = base / "big";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(shadow) << "root:$6$SECRETHASH:19000:0:99999:7:::\n";
  std::ofstream(big) << std::string(size_t{5} << 20, '#');
  struct Case {
    std::string path, says;
  };
  for (const Case& c : std::vector<Case>{
           {"/dev/zero", "the hostfile /dev/zero is a character device, not a regular file"},
           {fifo, "the hostfile " + fifo + " is a FIFO, not a regular file"},
           {base.path(), "is a folder, not a regular file"},
           {big, "has 5242880 bytes; at most 4194304 are read"},
           {shadow, shadow + " line 1: its first field is not a host name or address"},
       }) {
    auto r = testing::Run(
        {kBin + "/een-launch", "--hostfile", c.path, "--ps", "1", "--workers", "1", "--", "true"},
        seconds(30));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("SECRETHASH"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace een
