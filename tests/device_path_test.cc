// The GPU worker path end to end on CPU tensors: EEN_FAKE_DEVICE_COPIES=1
// sends CPU parameters through the device path (gradients staged into the
// host buckets by asynchronous copies of a fake device that runs each copy
// late, on a thread of its own; pulls into host mirrors copied back before
// the next forward). Whatever the job does, the result must be bitwise the
// CPU path's: server optimizers and sum mode, tcp and shared memory,
// buffers, accumulation, clipping, schedules, and a PS killed mid-step with
// replicas 2.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "support/files.h"
#include "support/job_output.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;
const std::map<std::string, std::string> kFake = {{"EEN_FAKE_DEVICE_COPIES", "1"}};

class DevicePath : public ::testing::Test {
 protected:
  // equivalence_train's final parameters (raw float32) under een-launch.
  std::string Train(const std::string& name, const std::vector<std::string>& launch,
                    const std::vector<std::string>& program,
                    const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv = {kBin + "/een-launch"};
    argv.insert(argv.end(), launch.begin(), launch.end());
    argv.insert(argv.end(), {"--", kBin + "/equivalence_train", "--out", base_ + "/" + name});
    argv.insert(argv.end(), program.begin(), program.end());
    auto r = testing::Run(argv, seconds(120), env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (!env.empty()) {
      EXPECT_NE(r.output.find("through a fake device"), std::string::npos) << r.output;
    }
    return testing::ReadBytes(base_ + "/" + name);
  }
  testing::ScratchFolder scratch_{"device-path-test"};
  const std::string base_ = scratch_.path();
};

TEST_F(DevicePath, ServerOptimizersAndSumModeAreBitwiseTheCpuPaths) {
  for (const std::string optimizer : {"adam", "sum"}) {
    const std::vector<std::string> program = {"--optimizer", optimizer};
    const std::string cpu = Train(optimizer + "-cpu", {"--ps", "2", "--workers", "4"}, program);
    ASSERT_GT(cpu.size(), 10000u);
    EXPECT_EQ(Train(optimizer + "-tcp", {"--ps", "2", "--workers", "4"}, program, kFake), cpu)
        << optimizer << " over tcp";
    EXPECT_EQ(Train(optimizer + "-shm", {"--ps", "2", "--workers", "4", "--transport", "shm"},
                    program, kFake),
              cpu)
        << optimizer << " over shared memory (the buckets are the shared segments)";
  }
}

TEST_F(DevicePath, BuffersAccumulationClippingAndSchedulesAreBitwiseTheCpuPaths) {
  auto job = [&](const std::string& out, const std::map<std::string, std::string>& env) {
    auto r = testing::Run({kBin + "/een-launch", "--ps", "2", "--workers", "3", "--",
                           kBin + "/semantics_train", "--out", base_ + "/" + out, "--steps", "12",
                           "--accumulate", "2", "--clip", "0.2", "--schedule"},
                          seconds(120), env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return testing::ReadBytes(base_ + "/" + out + ".rank-0.bin");
  };
  const std::string cpu = job("cpu", {});
  ASSERT_FALSE(cpu.empty());
  EXPECT_EQ(job("fake", kFake), cpu);
}

TEST_F(DevicePath, AKilledPsWithReplicas2ChangesNothing) {
  const std::vector<std::string> launch = {"--ps",       "3", "--workers",           "2",
                                           "--replicas", "2", "--progress-interval", "200ms"};
  const std::vector<std::string> program = {"--optimizer", "adam", "--steps", "3000"};
  const std::string whole = Train("whole", launch, program, kFake);
  ASSERT_GT(whole.size(), 10000u);

  std::vector<std::string> argv = {kBin + "/een-launch"};
  argv.insert(argv.end(), launch.begin(), launch.end());
  argv.insert(argv.end(), {"--", kBin + "/equivalence_train", "--out", base_ + "/killed"});
  argv.insert(argv.end(), program.begin(), program.end());
  testing::Subprocess job(argv, kFake);
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::this_thread::sleep_for(milliseconds(400));
  const pid_t ps = testing::NewestPid(job.output(), "ps 1");
  ASSERT_GT(ps, 0) << job.output();
  const size_t mark = job.output().size();
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  ASSERT_TRUE(
      job.WaitForOutput("sending this step's gradients to their new primaries", seconds(30), mark))
      << job.output();
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_EQ(testing::ReadBytes(base_ + "/killed"), whole);
}

}  // namespace
}  // namespace een
