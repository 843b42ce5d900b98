// --dynamic-slicing auto (issue 17), whole jobs of tests/slicing_train.cc:
//  - 4 workers, worker 1 three times slower per sample for its first 300
//    steps, then as fast as the others: the shares follow it down and back
//    up (the job only ends once they came back near equal, within 3000 steps), at every step
//    the workers' slices tile the global batch exactly, and the final
//    parameters are bitwise those of BSP with the same per-step batches
//    (each worker's mean gradient weighted by its share of the samples),
//    recomputed in one process from the slices the workers wrote.
//  - under ssp:2, with a loss whose gradients do not depend on the values,
//    the same, but for float rounding: each gradient is applied alone and
//    weighs its worker's share.
//  - dynamic slicing is refused under async and with a bad value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "support/files.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;
constexpr int kWorkers = 4, kBatch = 16, kMaxSteps = 3000;

class Slicing : public ::testing::Test {
 protected:
  testing::ScratchFolder scratch_{"slicing-test"};
};

// A job of 4 slicing_train workers under `consistency`, worker 1 three
// times slower per sample for its first 300 steps.
testing::RunResult RunJob(const std::string& consistency, const std::string& out, bool linear) {
  std::vector<std::string> args = {kBin + "/een-launch",
                                   "--ps",
                                   "2",
                                   "--workers",
                                   std::to_string(kWorkers),
                                   "--consistency",
                                   consistency,
                                   "--dynamic-slicing",
                                   "auto",
                                   "--progress-interval",
                                   "500ms",
                                   "--",
                                   kBin + "/slicing_train",
                                   "--out",
                                   out,
                                   "--steps",
                                   "300",
                                   "--max-steps",
                                   std::to_string(kMaxSteps),
                                   "--batch",
                                   std::to_string(kBatch),
                                   "--micros-per-sample",
                                   "200",
                                   "--slow-rank",
                                   "1",
                                   "--slow-factor",
                                   "3",
                                   "--slow-steps",
                                   "300"};
  if (linear) args.push_back("--linear");
  return testing::Run(args, seconds(400));
}

// The slices every worker wrote: at every step they tile the global batch
// in rank order, and the slow worker 1 had a smaller share for a while
// but not to the end (the shares came back near equal).
void ExpectSlicesFollowWorker1(const std::string& out, const std::string& output) {
  // step -> rank -> (offset, count)
  std::map<uint64_t, std::map<int, std::pair<uint64_t, uint64_t>>> slices;
  for (int r = 0; r < kWorkers; ++r) {
    std::ifstream in(out + ".slices-" + std::to_string(r));
    uint64_t step, offset, count;
    while (in >> step >> offset >> count) slices[step][r] = {offset, count};
  }
  ASSERT_GE(slices.size(), 300u);
  EXPECT_LT(slices.size(), static_cast<size_t>(kMaxSteps))
      << "the shares never came back near equal after worker 1 recovered\n"
      << output;
  uint64_t smallest_of_1 = kBatch, unequal_steps = 0;
  for (const auto& [step, of_step] : slices) {
    ASSERT_EQ(of_step.size(), static_cast<size_t>(kWorkers)) << "step " << step;
    uint64_t next = 0;  // in rank order, each slice starts where the last ended
    for (const auto& [rank, slice] : of_step) {
      EXPECT_EQ(slice.first, next) << "step " << step << ", worker " << rank;
      EXPECT_GE(slice.second, 1u) << "step " << step << ", worker " << rank;
      next = slice.first + slice.second;
    }
    EXPECT_EQ(next, static_cast<uint64_t>(kWorkers * kBatch)) << "step " << step;
    smallest_of_1 = std::min(smallest_of_1, of_step.at(1).second);
    if (of_step.at(1).second != kBatch) unequal_steps++;
  }
  EXPECT_LT(smallest_of_1, static_cast<uint64_t>(kBatch) * 3 / 4)
      << "worker 1 (3x slower) kept a near-equal share\n"
      << output;
  std::printf("[ slicing ] %zu steps, %llu of them with unequal shares, worker 1's smallest %llu\n",
              slices.size(), static_cast<unsigned long long>(unequal_steps),
              static_cast<unsigned long long>(smallest_of_1));
}

// BSP with the slices the workers took, recomputed in one process.
std::string Reference(const std::string& out, bool linear) {
  std::vector<std::string> args = {kBin + "/slicing_train",
                                   "--reference",
                                   "--out",
                                   out,
                                   "--workers",
                                   std::to_string(kWorkers),
                                   "--batch",
                                   std::to_string(kBatch)};
  if (linear) args.push_back("--linear");
  auto reference = testing::Run(args, seconds(120));
  EXPECT_EQ(reference.exit_code, 0) << reference.output;
  return testing::ReadBytes(out + ".reference");
}

TEST_F(Slicing, SharesFollowASlowWorkerTileEveryBatchAndEqualBspWithTheSameBatches) {
  const std::string out = scratch_ / "job";
  auto job = RunJob("bsp", out, false);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("dynamic slicing: "), std::string::npos) << job.output;
  ExpectSlicesFollowWorker1(out, job.output);
  const std::string expected = Reference(out, false);
  ASSERT_FALSE(expected.empty());
  for (int r = 0; r < kWorkers; ++r) {
    EXPECT_TRUE(testing::ReadBytes(out + ".rank-" + std::to_string(r)) == expected)
        << "worker " << r << "'s parameters differ from BSP with the same batches";
  }
}

// Under ssp:2 each gradient is applied alone, as it arrives, weighted by
// its worker's share of its step's global batch (n_w * N / B at lr / N), so
// one gradient from each worker adds up to the global batch's mean. With a
// loss whose gradients do not depend on the values (--linear), any order
// of arrival ends where BSP with the same batches does, but for float
// rounding; without the weighting, worker 1's small slices would count as
// much as the others' large ones and the values would differ by far more.
TEST_F(Slicing, UnderSspEachGradientWeighsItsWorkersShare) {
  const std::string out = scratch_ / "ssp";
  auto job = RunJob("ssp:2", out, true);
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("dynamic slicing: "), std::string::npos) << job.output;
  ExpectSlicesFollowWorker1(out, job.output);
  const std::vector<float> expected = testing::Floats(Reference(out, true));
  ASSERT_FALSE(expected.empty());
  for (int r = 0; r < kWorkers; ++r) {
    const std::vector<float> got =
        testing::Floats(testing::ReadBytes(out + ".rank-" + std::to_string(r)));
    ASSERT_EQ(got.size(), expected.size()) << "worker " << r;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], expected[i], 1e-4 * (1 + std::abs(expected[i])))
          << "worker " << r << ", value " << i;
    }
  }
}

TEST_F(Slicing, RefusedWhereItCannotWork) {
  auto async = testing::Run(
      {kBin + "/een-launch", "--ps", "1", "--workers", "2", "--consistency", "async",
       "--dynamic-slicing", "auto", "--", kBin + "/slicing_train", "--out", scratch_ / "async"},
      seconds(60));
  EXPECT_NE(async.exit_code, 0);
  EXPECT_NE(async.output.find("under async a fast worker already takes more batches"),
            std::string::npos)
      << async.output;
  auto bad = testing::Run({kBin + "/een-launch", "--ps", "1", "--workers", "2", "--dynamic-slicing",
                           "sometimes", "--", kBin + "/slicing_train", "--out", scratch_ / "bad"},
                          seconds(60));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("'sometimes' is not off or auto"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace een
