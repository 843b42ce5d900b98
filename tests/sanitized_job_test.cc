// Whole jobs without LibTorch, so that a sanitizer build (EEN_SANITIZE) runs
// every role instrumented: een-launch starts the coordinator, the PS and
// een-bench-worker processes replaying a small trace (pushes during a
// simulated backward, pulls, the server optimizer). Over tcp and shared
// memory, with a PS killed under replicas 2 (failover, backups rebuilt),
// and with strangers poking the job. Each must end as it does unsanitized:
// exit 0, and no sanitizer report (any report fails the process).
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <regex>

#include "support/job_output.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

class SanitizedJob : public ::testing::Test {
 protected:
  void SetUp() override {
    // Nine tensors, 3.4 M floats: several buckets and chunks, quick under ASan.
    std::ofstream trace(base_ / "tiny.trace");
    trace << "# een trace v1: tiny\n";
    for (int i = 8; i >= 0; --i)
      trace << "layer" << i << ".weight\t" << (i % 3 + 1) * 262144 << "\n";
  }
  std::vector<std::string> Job(std::vector<std::string> flags, int steps) const {
    std::vector<std::string> argv = {kBin + "/een-launch",  "--ps", "2", "--workers", "2",
                                     "--progress-interval", "200ms"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", kBin + "/een-bench-worker", base_ / "tiny.trace", "--steps",
                             std::to_string(steps), "--warmup", "0", "--report", base_.path()});
    return argv;
  }
  testing::ScratchFolder base_{"sanitized-job-test"};
};

TEST_F(SanitizedJob, TcpAndSharedMemoryJobsFinish) {
  for (const char* transport : {"tcp", "shm"}) {
    auto r = testing::Run(Job({"--transport", transport}, 30), seconds(240));
    EXPECT_EQ(r.exit_code, 0) << transport << "\n" << r.output;
    EXPECT_NE(r.output.find("job finished: 2 of 2 workers succeeded"), std::string::npos)
        << r.output;
  }
}

TEST_F(SanitizedJob, AKilledPsFailsOverToItsBackups) {
  testing::Subprocess job(Job({"--replicas", "2"}, 300));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(120))) << job.output();
  const pid_t ps = testing::NewestPid(job.output(), "ps 1");
  ASSERT_GT(ps, 0) << job.output();
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  auto code = job.Wait(seconds(240));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("failing over:"), std::string::npos) << job.output();
  EXPECT_NE(job.output().find("joins the running job: it backs up"), std::string::npos)
      << job.output();
  EXPECT_EQ(job.output().find("ERROR: AddressSanitizer"), std::string::npos) << job.output();
  EXPECT_EQ(job.output().find("runtime error:"), std::string::npos) << job.output();
}

TEST_F(SanitizedJob, StrangersAreRefusedWithoutAReport) {
  testing::Subprocess job(Job({}, 100000));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(120))) << job.output();
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  const std::string secret = testing::JobSecretFile(job.output());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.output(), m,
                                std::regex("data plane: [a-z ]+ on (tcp://[0-9.]+:[0-9]+)")))
      << job.output();
  const std::string ps = m[1];
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{},
        {"--secret-file", secret, "--identity", "worker:1", "--as-worker", "0"}}) {
    for (const auto& [address, to] : {std::pair{ps, "ps"}, {coordinator, "coordinator"}}) {
      std::vector<std::string> argv = {
          kBin + "/stranger_client", "--address", address, "--to", to, "--wait-ms", "500"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto r = testing::Run(argv, seconds(60));
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
  }
  job.Signal(SIGINT);
  auto code = job.Wait(seconds(60));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 130) << job.output();
  EXPECT_EQ(job.output().find("ERROR: AddressSanitizer"), std::string::npos) << job.output();
  EXPECT_EQ(job.output().find("runtime error:"), std::string::npos) << job.output();
}

}  // namespace
}  // namespace een
