// `eenctl metrics` on a running job: every PS and worker shows what it
// measured (pushes and pull answers, with their bytes), as a user would
// check that traffic flows; only eenctl (the job's secret) may ask.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>
#include <string>

#include "support/job_output.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

// The counter `name` on the line of `who` ("ps 1", "worker 0"); -1: absent.
long long CounterOf(const std::string& output, const std::string& who, const std::string& name) {
  std::smatch m;
  const std::regex line("(^|\n)" + who + " \\(pid [0-9]+[^\n]*");
  if (!std::regex_search(output, m, line)) return -1;
  const std::string text = m[0];
  std::smatch v;
  if (!std::regex_search(
          text, v,
          std::regex(" " + std::regex_replace(name, std::regex("\\."), "\\.") + "=([0-9]+)"))) {
    return -1;
  }
  return std::stoll(v[1]);
}

TEST(EenctlMetrics, EveryProcessShowsItsTraffic) {
  testing::ScratchFolder base("eenctl-metrics");
  const std::string dir = base.path();
  testing::Subprocess job({kBin + "/een-launch", "--ps", "2", "--workers", "2",
                           "--progress-interval", "200ms", "--", kBin + "/equivalence_train",
                           "--steps", "1000000", "--out", dir + "/params.bin"});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  ASSERT_FALSE(coordinator.empty()) << job.output();

  // Heartbeats carry the counters: poll until every process has reported traffic.
  std::string output;
  bool all = false;
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (!all && std::chrono::steady_clock::now() < deadline) {
    auto r = testing::Run({kBin + "/eenctl", "metrics", "--coordinator", coordinator}, seconds(30));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    output = r.output;
    all = true;
    for (const char* ps : {"ps 0", "ps 1"}) {
      all = all && CounterOf(output, ps, "ps.pushes") > 0 &&
            CounterOf(output, ps, "ps.push_bytes") > 0 &&
            CounterOf(output, ps, "ps.pulls_answered") > 0;
    }
    for (const char* w : {"worker 0", "worker 1"}) {
      all = all && CounterOf(output, w, "worker.pushes") > 0 &&
            CounterOf(output, w, "worker.pull_bytes") > 0;
    }
    // The next progress line (every 200 ms) means newer heartbeats are in.
    if (!all) job.WaitForOutput("progress: step", seconds(2), job.output().size());
  }
  EXPECT_TRUE(all) << output;
  EXPECT_EQ(CounterOf(output, "ps 0", "ps.messages_refused"), 0) << output;

  // Without the job's secret the coordinator does not answer.
  const std::string wrong = testing::WriteJobSecret(dir + "/wrong-secret");
  auto refused = testing::Run(
      {kBin + "/eenctl", "--secret-file", wrong, "metrics", "--coordinator", coordinator},
      seconds(30));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_EQ(refused.output.find("ps.pushes"), std::string::npos) << refused.output;

  job.Signal(SIGINT);
  EXPECT_TRUE(job.Wait(seconds(30)).has_value());
}

}  // namespace
}  // namespace een
