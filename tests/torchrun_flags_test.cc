// torchrun's habits at een-launch's door (launcher/torchrun_flags.h): which
// spellings become een-launch's, which are refused and with what advice,
// and how typos and a forgotten `--` are explained.
#include "launcher/torchrun_flags.h"

#include <gtest/gtest.h>

namespace een {
namespace {

const std::vector<std::string> kKnown = {"--ps",     "--workers",      "--nproc-per-node",
                                         "--rdzv",   "--node-rank",    "--master-addr",
                                         "--nnodes", "--max-restarts", "--min-workers"};

TEST(TorchrunFlags, TorchrunSpellingsBecomeEenLaunchs) {
  std::vector<std::string> args = {"--nproc_per_node", "4",
                                   "--node_rank=1",    "--rdzv_endpoint",
                                   "h:29400",          "--rdzv-endpoint=h:1",
                                   "--master_port",    "-1",
                                   "--max_restarts",   "2"};
  ASSERT_TRUE(TranslateTorchrunFlags(&args).ok());
  EXPECT_EQ(args,
            (std::vector<std::string>{"--nproc-per-node", "4", "--node-rank=1", "--rdzv", "h:29400",
                                      "--rdzv=h:1", "--master-port", "-1", "--max-restarts", "2"}));
}

TEST(TorchrunFlags, FlagsWithNoEquivalentAreRefusedWithEensWay) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--standalone", "drop --standalone"},
      {"--rdzv_backend=c10d", "--rdzv HOST:PORT"},
      {"--rdzv-id", "TORCHELASTIC_RUN_ID"},
      {"--no_python", "as written"},
      {"-m", "python3 -m MODULE"},
      {"--log_dir", "redirect"},
      {"--tee", "tee job.log"},
      {"--monitor-interval", "--failover-threshold"},
  };
  for (const auto& [flag, advice] : cases) {
    std::vector<std::string> args = {"--ps", "1", flag};
    Status s = TranslateTorchrunFlags(&args);
    ASSERT_FALSE(s.ok()) << flag;
    EXPECT_NE(s.message().find("torchrun's"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(advice), std::string::npos) << flag << ": " << s.message();
  }
}

TEST(TorchrunFlags, ValuesThatLookLikeFlagsAreLeftAlone) {
  std::vector<std::string> args = {"--snapshot-every", "-1", "--host", "10.0.0.1"};
  ASSERT_TRUE(TranslateTorchrunFlags(&args).ok());
  EXPECT_EQ(args[1], "-1");
}

TEST(TorchrunFlags, ATypoGetsTheNearestFlag) {
  EXPECT_EQ(NearestFlag("--worker", kKnown), "--workers");
  EXPECT_EQ(NearestFlag("--wokers", kKnown), "--workers");
  EXPECT_EQ(NearestFlag("--min_workers", kKnown), "--min-workers");
  EXPECT_EQ(NearestFlag("--nproc", kKnown), "--nproc-per-node");
  EXPECT_EQ(NearestFlag("--epochs", kKnown), "");
  EXPECT_EQ(ExplainUnparsed({"--worker", "4"}, kKnown),
            "unknown flag --worker: did you mean --workers?");
  EXPECT_NE(ExplainUnparsed({"--epochs=3"}, kKnown).find("the program's own flags go after --"),
            std::string::npos);
}

TEST(TorchrunFlags, AProgramWithoutTheDoubleDashIsShownWithIt) {
  EXPECT_EQ(ExplainUnparsed({"./train", "--epochs", "3"}, kKnown),
            "'./train' is not an een-launch flag: put the program after --, e.g. `een-launch "
            "--ps 2 --workers 4 -- ./train --epochs 3`");
  EXPECT_NE(ExplainUnparsed({"train.py"}, kKnown).find("-- python3 train.py`"), std::string::npos);
}

TEST(TorchrunFlags, APythonFileIsRunWithPython) {
  EXPECT_NE(ProgramProblem("no_such_dir/train.py").find("python3 no_such_dir/train.py"),
            std::string::npos);
  EXPECT_EQ(ProgramProblem("python3"), "");
  EXPECT_EQ(ProgramProblem("./train"), "");
}

}  // namespace
}  // namespace een
