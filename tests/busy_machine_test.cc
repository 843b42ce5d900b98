// No false losses on a busy machine: the mission's layout, 4 PS x 32
// workers with replicas 2, training fashion_mnist on this machine's few
// cores with busy loops beside it, one PS SIGKILLed once training runs. The
// failover goes well, and when the 32 workers finish and evaluate at once
// (the moment a live PS used to be declared lost, "silent for 567 ms >
// failover threshold 500 ms"), no live process is declared lost: the job
// ends with exit 0 and every worker's success (a process the coordinator
// finds slow but running is only warned of).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <regex>
#include <vector>

#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

TEST(BusyMachine, ALivePsIsNotDeclaredLostWhen32WorkersAndABusyLoopShareTheCores) {
  std::vector<std::unique_ptr<testing::Subprocess>> hogs;  // killed when the test ends
  for (int i = 0; i < 2; ++i) {
    hogs.push_back(std::make_unique<testing::Subprocess>(
        std::vector<std::string>{"sh", "-c", "while :; do :; done"}));
  }
  testing::Subprocess job({kBin + "/een-launch", "--ps", "4", "--workers", "32", "--replicas", "2",
                           "--", kBin + "/fashion_mnist", "--epochs", "1", "--train-limit", "32000",
                           "--batch-size", "16"});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(240))) << job.output();
  std::smatch m;
  const std::string out = job.output();
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex("registered ps 3 \\(host [^,]+, pid ([0-9]+)\\)")))
      << out;
  ASSERT_EQ(kill(std::stoi(m[1]), SIGKILL), 0);
  auto code = job.Wait(seconds(400));
  ASSERT_TRUE(code.has_value()) << "the job did not end\n" << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("ps 3 (pid " + std::string(m[1]) +
                              ") was killed by SIGKILL; its "
                              "backups take over"),
            std::string::npos)
      << job.output();
  // A loss is said "silent for N ms > the threshold"; a slow process still
  // running is only warned of ("silent for N ms, but its process still runs").
  EXPECT_FALSE(std::regex_search(job.output(), std::regex("silent for [0-9]+ ms >")))
      << "a live process was declared lost\n"
      << job.output();
  EXPECT_NE(job.output().find("job finished: 32 of 32 workers succeeded"), std::string::npos)
      << job.output();
}

}  // namespace
}  // namespace een
