// Adding capacity and draining while training goes on: a third PS started
// by hand with the job's environment joins and takes its share of the
// shards; then `eenctl drain` moves everything off PS 0, which leaves, and
// `eenctl snapshot` (a membership round) is agreed by the PS left (before,
// the round waited for the drained PS's answer forever). The final
// parameters are bitwise those of an undisturbed run, with one copy of each
// shard and with two.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "support/files.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

std::vector<std::string> Job(const std::string& replicas, const std::string& out) {
  return {kBin + "/een-launch",
          "--ps",
          "2",
          "--workers",
          "2",
          "--replicas",
          replicas,
          "--snapshot-every",
          "1000000",  // practically never: only the one asked for
          "--snapshot-dir",
          out + ".snapshots",
          "--progress-interval",
          "200ms",
          "--",
          kBin + "/equivalence_train",
          "--optimizer",
          "adam",
          "--steps",
          "6000",
          "--out",
          out};
}

class Migration : public ::testing::TestWithParam<std::string> {};

TEST_P(Migration, AddAPsThenDrainOneWhileTrainingChangesNothing) {
  const std::string base = "/tmp/een-migration-test-" + std::to_string(getpid());
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  auto whole = testing::Run(Job(GetParam(), base + "/whole.bin"), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job(GetParam(), base + "/moved.bin"));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  ASSERT_FALSE(coordinator.empty()) << job.output();
  testing::Subprocess extra({kBin + "/een-ps"},
                            {{"EEN_COORDINATOR", coordinator},
                             {"EEN_ROLE", "ps"},
                             {"EEN_RANK", "2"},
                             {"EEN_WORLD_SIZE", "2"},
                             {"EEN_NUM_PS", "3"},
                             {"EEN_HOST", "127.0.0.1"},
                             {"EEN_DATA_TRANSPORT", "tcp"},
                             {"EEN_SNAPSHOT_DIR", base + "/moved.bin.snapshots"},
                             {"EEN_SNAPSHOT_EVERY", "1000000"},
                             {"EEN_JOB_SECRET_FILE", testing::JobSecretFile(job.output())}});
  ASSERT_TRUE(job.WaitForOutput("shard moves done", seconds(30))) << job.output() << extra.output();
  const std::string out = job.output();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex("shard moves done: ([0-9]+) shard\\(s\\) \\(([0-9]+) bytes")));
  RecordProperty("added_ps_moved_bytes", m[2].str());
  EXPECT_GT(std::stoull(m[2].str()), 0u) << out;

  const size_t mark = job.output().size();
  auto drain = testing::Run({kBin + "/eenctl", "drain", "--coordinator", coordinator, "--ps", "0"},
                            seconds(30));
  EXPECT_EQ(drain.exit_code, 0) << drain.output;
  EXPECT_NE(drain.output.find("draining ps 0"), std::string::npos) << drain.output;
  ASSERT_TRUE(job.WaitForOutput("is drained and leaves", seconds(30), mark)) << job.output();
  ASSERT_TRUE(job.WaitForOutput("ps 0 left", seconds(30), mark)) << job.output();
  // Draining again: refused, with the reason.
  auto again = testing::Run({kBin + "/eenctl", "drain", "--coordinator", coordinator, "--ps", "0"},
                            seconds(30));
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("lost or gone already"), std::string::npos) << again.output;
  // A membership round (a snapshot on demand) among the PS left.
  auto asked =
      testing::Run({kBin + "/eenctl", "snapshot", "--coordinator", coordinator}, seconds(30));
  ASSERT_EQ(asked.exit_code, 0) << asked.output << job.output();
  std::smatch step;
  ASSERT_TRUE(std::regex_search(asked.output, step, std::regex("every PS snapshots step ([0-9]+)")))
      << asked.output;
  EXPECT_TRUE(job.WaitForOutput("snapshot of step " + step[1].str() + " complete on all 2 PS",
                                seconds(30), mark))
      << job.output();

  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  auto extra_code = extra.Wait(seconds(30));
  ASSERT_TRUE(extra_code.has_value()) << extra.output();
  EXPECT_EQ(*extra_code, 0) << extra.output();
  EXPECT_EQ(testing::ReadBytes(base + "/moved.bin"), testing::ReadBytes(base + "/whole.bin"))
      << "parameters differ after the shards moved";
  std::filesystem::remove_all(base);
}

INSTANTIATE_TEST_SUITE_P(Replicas, Migration, ::testing::Values("1", "2"));

}  // namespace
}  // namespace een
