// Who may take a rank (issue 11: replacements on the launcher's word, not on
// a Register; issue 12: a role lost during start-up is replaced at once). A
// PS killed before the job started is replaced by een-launch and the job
// trains as if nothing happened (no replicas, no snapshots needed); a second
// process claiming a live PS's rank, with the job's secret, is refused after
// a while and the job goes on undisturbed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/files.h"
#include "support/job_output.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

class RankClaims : public ::testing::Test {
 protected:
  std::vector<std::string> Job(const std::string& out, std::vector<std::string> launch,
                               std::vector<std::string> program = {}) const {
    std::vector<std::string> argv = {kBin + "/een-launch",  "--ps", "2", "--workers", "2",
                                     "--progress-interval", "200ms"};
    argv.insert(argv.end(), launch.begin(), launch.end());
    argv.insert(argv.end(),
                {"--", kBin + "/equivalence_train", "--optimizer", "adam", "--out", base_ / out});
    argv.insert(argv.end(), program.begin(), program.end());
    return argv;
  }
  testing::ScratchFolder base_{"rank-claims-test"};
};

TEST_F(RankClaims, APsKilledBeforeTheJobStartedIsReplacedAndNothingChanges) {
  auto whole = testing::Run(Job("whole.bin", {}, {"--steps", "300"}), seconds(120));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string gate = base_ / "workers-may-join";
  testing::Subprocess job(Job("killed.bin", {}, {"--steps", "300", "--join-after", gate}));
  ASSERT_TRUE(job.WaitForOutput("registered ps 1", seconds(60))) << job.output();
  const pid_t ps = testing::NewestPid(job.output(), "ps 1");
  ASSERT_GT(ps, 0) << job.output();
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  ASSERT_TRUE(
      job.WaitForOutput("before the job started; its rank is free for a replacement", seconds(30)))
      << job.output();
  std::ofstream(gate) << "go\n";  // only now may the workers register
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("the job had not started: a replacement takes its rank"),
            std::string::npos)
      << job.output();
  EXPECT_EQ(testing::ReadBytes(base_ / "killed.bin"), testing::ReadBytes(base_ / "whole.bin"));
}

TEST_F(RankClaims, ASecondProcessForALiveRankIsRefusedAndChangesNothing) {
  const std::vector<std::string> launch = {"--replicas", "2"};
  auto whole = testing::Run(Job("whole.bin", launch, {"--steps", "400"}), seconds(180));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  // Worker 0 holds the job at step 200 until the claim is over.
  const std::string gate = base_ / "claim-over";
  testing::Subprocess job(
      Job("claimed.bin", launch,
          {"--steps", "400", "--stall-rank", "0", "--stall-step", "200", "--stall-until", gate}));
  ASSERT_TRUE(job.WaitForOutput("holds at step 200", seconds(90))) << job.output();
  // A PS started by hand for rank 1, which ps 1 holds and keeps alive.
  auto second = testing::Run({kBin + "/een-ps"}, seconds(60),
                             {{"EEN_COORDINATOR", testing::CoordinatorAddress(job.output())},
                              {"EEN_JOB_SECRET_FILE", testing::JobSecretFile(job.output())},
                              {"EEN_ROLE", "ps"},
                              {"EEN_RANK", "1"},
                              {"EEN_WORLD_SIZE", "2"},
                              {"EEN_NUM_PS", "2"},
                              {"EEN_RUN_DIR", base_.path()}});
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("ps rank 1 is held by a live process"), std::string::npos)
      << second.output;
  EXPECT_EQ(job.output().find("job finished"), std::string::npos) << "the claim came too late";
  std::ofstream(gate).put('\n');
  auto code = job.Wait(seconds(180));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("asks for the rank of ps 1"), std::string::npos) << job.output();
  EXPECT_EQ(job.output().find("was replaced"), std::string::npos) << job.output();
  EXPECT_EQ(testing::ReadBytes(base_ / "claimed.bin"), testing::ReadBytes(base_ / "whole.bin"));
}

}  // namespace
}  // namespace een
