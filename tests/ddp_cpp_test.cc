// DDP's gradient synchronisation from a C++ LibTorch program on the een
// process group ends bitwise where it ends on gloo (tests/ddp_cpp_train.cc).
#include <gtest/gtest.h>

#include "support/files.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

class DdpFromCpp : public ::testing::TestWithParam<std::string> {
 protected:
  // Rank 0's final parameters after a run on `backend` (een through 2 PS,
  // gloo with none).
  std::vector<float> Train(const std::string& backend) {
    const std::string out = folder_ / (backend + ".bin");
    auto r = testing::Run(
        {kBin + "/een-launch", "--ps", backend == "een" ? "2" : "0", "--workers", "2", "--",
         kBin + "/ddp_cpp_train", "--backend", backend, "--optimizer", GetParam(), "--out", out},
        seconds(120));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rank 1 of 2 (" + backend + ", 3 buckets): final loss"),
              std::string::npos)
        << r.output;
    return testing::ReadFloats(out);
  }
  testing::ScratchFolder folder_{"ddp-cpp-test"};
};

TEST_P(DdpFromCpp, TrainsBitwiseAsWithGlooOnTwoWorkers) {
  const std::vector<float> gloo = Train("gloo"), een = Train("een");
  ASSERT_EQ(gloo.size(), 8u * 64 + 64 + 64 * 64 + 64 + 64 + 1);  // the whole model
  EXPECT_EQ(een, gloo);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DdpFromCpp, ::testing::Values("sgd", "adam"));

}  // namespace
}  // namespace een
