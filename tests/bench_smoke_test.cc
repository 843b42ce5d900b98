// een-bench, briefly: a few steps of the ResNet-50 trace through the real
// runtime and the references. Checks that it completes and that its figures
// are sane (positive, and bytes per step what the trace says); never a time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

TEST(BenchSmoke, ReplayCompletesWithSaneFigures) {
  auto r = testing::Run({kBin + "/een-bench", "replay",
                         std::string(EEN_SOURCE_DIR) + "/samples/traces/resnet50.trace", "--ps",
                         "1", "--workers", "1", "--steps", "2", "--warmup", "1", "--rounds", "2"},
                        seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  for (const char* row : {"een push\\+pull", "raw ZeroMQ", "memcpy"}) {
    ASSERT_TRUE(std::regex_search(
        r.output, m, std::regex(std::string(row) + " +([0-9.]+) +([0-9.]+) +([0-9.]+)")))
        << row << "\n"
        << r.output;
    EXPECT_GT(std::stod(m[1]), 0.0) << row;
  }
  // 25,557,032 float32 parameters, pushed and pulled.
  EXPECT_NE(r.output.find("bytes on the wire per step per worker: 204.5 MB"), std::string::npos)
      << r.output;
  // Two rounds: each round's ratio, then their median.
  EXPECT_TRUE(std::regex_search(r.output, std::regex("een / raw ZeroMQ +[0-9.]+x [0-9.]+x\n")))
      << r.output;
  EXPECT_NE(r.output.find("ratios (median of 2 rounds): een / raw ZeroMQ = "), std::string::npos)
      << r.output;
}

// bf16 on the wire: half the bytes each way, and the job still completes.
TEST(BenchSmoke, Bf16WireMovesHalfTheBytes) {
  auto r = testing::Run(
      {kBin + "/een-bench", "replay",
       std::string(EEN_SOURCE_DIR) + "/samples/traces/resnet50.trace", "--ps", "2", "--workers",
       "2", "--steps", "2", "--warmup", "1", "--dtype", "bf16", "--no-references"},
      seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bytes on the wire per step per worker: 102.2 MB"), std::string::npos)
      << r.output;
  auto bad = testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "1", "--wire-dtype",
                           "int8", "--", "/bin/true"},
                          seconds(30));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("not one of fp32, bf16, fp16"), std::string::npos) << bad.output;
}

// --buffer-floats: the job runs again with a broadcast buffer, and the
// cost line names it.
TEST(BenchSmoke, BufferBroadcastCostIsPrinted) {
  auto r = testing::Run(
      {kBin + "/een-bench", "replay", std::string(EEN_SOURCE_DIR) + "/samples/traces/vgg16.trace",
       "--ps", "2", "--workers", "2", "--steps", "2", "--warmup", "1", "--buffer-floats", "53173",
       "--no-references"},
      seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("buffers broadcast each step \\(53173 floats, 0.43 MB pushed \\+ "
                           "pulled per worker\\): [0-9.]+x the step without them")))
      << r.output;
}

// Recording a trace from a LibTorch program (EEN_TRACE_RECORD), then
// replaying it: the recorded order is backward's, last layer first.
TEST(BenchSmoke, RecordedTraceReplays) {
  const std::string trace = "/tmp/een-recorded-" + std::to_string(getpid()) + ".trace";
  auto job = testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "2", "--",
                           kBin + "/equivalence_train", "--steps", "3", "--out", trace + ".bin"},
                          seconds(120), {{"EEN_TRACE_RECORD", trace}});
  ASSERT_EQ(job.exit_code, 0) << job.output;
  std::ifstream in(trace);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(std::regex_search(text, std::regex("^fc3\\.bias\t4\n", std::regex::multiline)))
      << text;
  auto r = testing::Run({kBin + "/een-bench", "replay", trace, "--steps", "2", "--warmup", "0"},
                        seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::remove(trace.c_str());
  std::remove((trace + ".bin").c_str());
}

// EEN_TIMELINE: a worker's timeline is valid trace-event JSON in which
// bucket pushes leave while backward still runs (the overlap DDP users
// expect), and the worker says how many did.
TEST(BenchSmoke, TimelineShowsPushesDuringBackward) {
  const std::string prefix = "/tmp/een-timeline-" + std::to_string(getpid());
  const std::string out = prefix + ".bin";
  auto job = testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "1", "--",
                           kBin + "/equivalence_train", "--steps", "5", "--out", out},
                          seconds(120), {{"EEN_TIMELINE", prefix}, {"EEN_BUCKET_BYTES", "256"}});
  ASSERT_EQ(job.exit_code, 0) << job.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.output, m,
                                std::regex("([0-9]+) of ([0-9]+) bucket pushes "
                                           "started during backward")))
      << job.output;
  EXPECT_GT(std::stoi(m[1]), 0);
  std::ifstream in(prefix + ".worker-0.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(text.rfind("{\"traceEvents\":[", 0), 0u) << text.substr(0, 200);
  // Some push lies inside some backward span.
  std::vector<std::pair<double, double>> backward;
  std::vector<double> pushes;
  const std::regex span(
      "\"name\":\"backward, step [0-9]+\",\"ph\":\"X\",\"ts\":([0-9.]+),\"dur\":([0-9.]+)");
  const std::regex push("\"name\":\"push bucket [^\"]*\",\"ph\":\"i\",\"ts\":([0-9.]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), span); it != std::sregex_iterator();
       ++it) {
    backward.push_back({std::stod((*it)[1]), std::stod((*it)[1]) + std::stod((*it)[2])});
  }
  for (auto it = std::sregex_iterator(text.begin(), text.end(), push); it != std::sregex_iterator();
       ++it) {
    pushes.push_back(std::stod((*it)[1]));
  }
  ASSERT_EQ(backward.size(), 5u) << text;
  int inside = 0;
  for (double p : pushes) {
    for (auto [b, e] : backward) inside += p >= b && p <= e;
  }
  EXPECT_GT(inside, 0) << text;
  std::remove((prefix + ".worker-0.json").c_str());
  std::remove(out.c_str());
}

}  // namespace
}  // namespace een
