// BSP through een-launch equals single-process training with the global
// batch, and two identical runs give bitwise identical parameters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "support/files.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

std::string Temp(const std::string& name) {
  return "/tmp/een-equivalence-" + std::to_string(getpid()) + "-" + name + ".bin";
}

std::vector<float> Distributed(const std::string& optimizer, const std::string& name,
                               const std::string& transport = "tcp",
                               std::map<std::string, std::string> env = {}) {
  const std::string out = Temp(name);
  auto r =
      testing::Run({kBin + "/een-launch", "--ps", "2", "--workers", "4", "--transport", transport,
                    "--", kBin + "/equivalence_train", "--optimizer", optimizer, "--out", out},
                   seconds(120), env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto v = testing::ReadFloats(out);
  std::remove(out.c_str());
  return v;
}

std::vector<float> Reference(const std::string& optimizer) {
  const std::string out = Temp("reference-" + optimizer);
  auto r = testing::Run({kBin + "/equivalence_train", "--reference", "--workers", "4",
                         "--optimizer", optimizer, "--out", out},
                        seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto v = testing::ReadFloats(out);
  std::remove(out.c_str());
  return v;
}

double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

class Equivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(Equivalence, FourWorkersMatchOneProcessWithTheGlobalBatch) {
  auto distributed = Distributed(GetParam(), GetParam());
  auto reference = Reference(GetParam());
  ASSERT_FALSE(reference.empty());
  ASSERT_EQ(distributed.size(), reference.size());
  const double diff = MaxAbsDifference(distributed, reference);
  std::ostringstream figure;
  figure << std::scientific << diff;
  RecordProperty("max_abs_difference", figure.str());
  std::printf("max abs difference, %s: %s\n", GetParam().c_str(), figure.str().c_str());
  EXPECT_LE(diff, 1e-5);
  // The runs trained: parameters moved well away from where they started.
  auto untrained = testing::Run(
      {kBin + "/equivalence_train", "--reference", "--steps", "0", "--out", Temp("start")},
      seconds(60));
  ASSERT_EQ(untrained.exit_code, 0);
  EXPECT_GT(MaxAbsDifference(testing::ReadFloats(Temp("start")), reference), 1e-2);
  std::remove(Temp("start").c_str());
}

// sum: the PS only averages; each worker steps torch::optim::SGD on the mean.
INSTANTIATE_TEST_SUITE_P(Optimizers, Equivalence, ::testing::Values("sgd", "adam", "sum"));

// DataParallel::CopyStateTo: the job's Adam state at step 10, saved with
// torch::save, loaded by plain LibTorch, trains on to where the job ends;
// and LoadStateFrom starts a job from it.
TEST(Checkpoint, ALibTorchCheckpointTrainsOnInPlainLibTorchAndStartsAJob) {
  const std::string checkpoint = Temp("checkpoint"), job = Temp("job"), plain = Temp("plain");
  auto r = testing::Run(
      {kBin + "/een-launch", "--ps", "2", "--workers", "4", "--", kBin + "/equivalence_train",
       "--optimizer", "adam", "--checkpoint", checkpoint, "--save-at", "10", "--out", job},
      seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::Run({kBin + "/equivalence_train", "--reference", "--workers", "4", "--optimizer",
                    "adam", "--checkpoint", checkpoint, "--save-at", "10", "--out", plain},
                   seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<float> from_job = testing::ReadFloats(job),
                           from_plain = testing::ReadFloats(plain);
  ASSERT_FALSE(from_job.empty());
  ASSERT_EQ(from_job.size(), from_plain.size());
  const double diff = MaxAbsDifference(from_job, from_plain);
  std::printf("10 steps on from the checkpoint, max abs difference: %.3e\n", diff);
  EXPECT_LE(diff, 1e-5);  // the global batch's mean, as Equivalence compares
  // A job started from it (LoadStateFrom) ends bitwise where the first did.
  const std::string resumed = Temp("resumed");
  r = testing::Run(
      {kBin + "/een-launch", "--ps", "2", "--workers", "4", "--", kBin + "/equivalence_train",
       "--optimizer", "adam", "--load", checkpoint, "--out", resumed},
      seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoint loaded: true, at step 10"), std::string::npos) << r.output;
  EXPECT_EQ(testing::ReadFloats(resumed), from_job);
  for (const char* suffix : {".model", ".optimizer"}) std::remove((checkpoint + suffix).c_str());
  for (const std::string& f : {job, plain, resumed}) std::remove(f.c_str());
}

TEST(Determinism, TwoIdenticalRunsAreBitwiseIdentical) {
  auto a = Distributed("adam", "first");
  auto b = Distributed("adam", "second");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// However a push is cut into messages (EEN_MESSAGE_BYTES=1: every chunk on
// its own), the job computes exactly the same.
TEST(Determinism, PushMessageSizeDoesNotChangeTheResult) {
  auto whole = Distributed("adam", "whole");
  auto cut = Distributed("adam", "cut", "tcp", {{"EEN_MESSAGE_BYTES", "1"}});
  ASSERT_FALSE(whole.empty());
  ASSERT_EQ(whole.size(), cut.size());
  EXPECT_EQ(0, std::memcmp(whole.data(), cut.data(), whole.size() * sizeof(float)));
}

// Through shared memory (--transport shm, or auto: each PS listens on tcp
// and shm, each worker picks per PS) the job computes exactly what it
// computes over TCP, and leaves no shared memory behind.
TEST(Determinism, SharedMemoryTransportIsBitwiseTheSameAsTcp) {
  auto tcp = Distributed("adam", "tcp");
  auto shm = Distributed("adam", "shm", "shm");
  auto per_pair = Distributed("adam", "auto", "auto");
  ASSERT_FALSE(tcp.empty());
  ASSERT_EQ(tcp.size(), shm.size());
  EXPECT_EQ(0, std::memcmp(tcp.data(), shm.data(), tcp.size() * sizeof(float)));
  ASSERT_EQ(tcp.size(), per_pair.size());
  EXPECT_EQ(0, std::memcmp(tcp.data(), per_pair.data(), tcp.size() * sizeof(float)));
}

}  // namespace
}  // namespace een
