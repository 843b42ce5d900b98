// The Slurm backend (issue 13) against a real Slurm: the test starts munged,
// slurmctld and slurmd (Debian's slurm-wlm and munge) on this machine, one
// node named localhost, in a scratch folder of its own. `srun een-launch
// --ps 2 --workers 2 -- PROGRAM` needs no other flag and ends bitwise as the
// local backend; the sample batch script runs a job; several tasks per node
// are refused. Several slurmd cannot run on one machine with Debian's build,
// so the multi-node step is checked through its variables: three
// een-launch, one per simulated host (network namespaces), each given the
// SLURM_* variables srun would set on its node.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "support/files.h"
#include "support/scratch_folder.h"
#include "support/simulated_hosts.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

bool Installed(const std::string& program) {
  return testing::Run({"sh", "-c", "command -v " + program}, seconds(10)).exit_code == 0;
}

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (slurmd, munged)";
    for (const char* program : {"slurmctld", "slurmd", "munged", "mungekey", "srun", "sbatch"}) {
      if (!Installed(program)) GTEST_SKIP() << program << " is not installed (slurm-wlm, munge)";
    }
    const std::string dir = base_.path();
    for (const char* sub : {"state", "spool", "log", "munge"}) {
      std::filesystem::create_directories(dir + "/" + sub);
    }
    // munged wants its socket's folder open to all (the key file is 0600).
    std::filesystem::permissions(dir + "/munge", std::filesystem::perms::owner_all |
                                                     std::filesystem::perms::group_exec |
                                                     std::filesystem::perms::others_exec);
    auto key = testing::Run({"mungekey", "-c", "-f", "-k", dir + "/munge/key"}, seconds(30));
    ASSERT_EQ(key.exit_code, 0) << key.output;
    const int port = 16800 + 2 * static_cast<int>(getpid() % 90);
    std::ofstream conf(dir + "/slurm.conf");
    conf << "ClusterName=eentest\n"
         << "SlurmctldHost=localhost(127.0.0.1)\n"
         << "SlurmctldPort=" << port << "\nSlurmdPort=" << port + 1 << "\n"
         << "AuthType=auth/munge\nCredType=cred/munge\n"
         << "AuthInfo=socket=" << dir << "/munge/sock\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "StateSaveLocation=" << dir << "/state\nSlurmdSpoolDir=" << dir << "/spool\n"
         << "SlurmctldPidFile=" << dir << "/slurmctld.pid\nSlurmdPidFile=" << dir << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << dir << "/log/slurmctld.log\nSlurmdLogFile=" << dir
         << "/log/slurmd.log\n"
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nMpiDefault=none\n"
         << "ReturnToService=2\nSchedulerType=sched/builtin\n"
         << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
         << "NodeName=localhost NodeAddr=127.0.0.1 CPUs=" << sysconf(_SC_NPROCESSORS_ONLN)
         << " State=UNKNOWN\n"
         << "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE\n";
    conf.close();
    setenv("SLURM_CONF", (dir + "/slurm.conf").c_str(), 1);
    munged_ = std::make_unique<testing::Subprocess>(std::vector<std::string>{
        "munged", "-F", "--key-file=" + dir + "/munge/key", "--socket=" + dir + "/munge/sock",
        "--pid-file=" + dir + "/munge/pid", "--log-file=" + dir + "/munge/log",
        "--seed-file=" + dir + "/munge/seed"});
    slurmctld_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{"slurmctld", "-D", "-i", "-f", dir + "/slurm.conf"});
    slurmd_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{"slurmd", "-D", "-N", "localhost", "-f", dir + "/slurm.conf"});
    // Ready once the node is idle (polled; each sinfo answers at once).
    auto ready = testing::Run({"sh", "-c",
                               "for i in $(seq 300); do [ \"$(sinfo -h -o %t 2>/dev/null)\" = "
                               "idle ] && exit 0; sleep 0.1; done; exit 1"},
                              seconds(60));
    ASSERT_EQ(ready.exit_code, 0) << "Slurm did not come up: "
                                  << testing::ReadBytes(dir + "/log/slurmctld.log")
                                  << testing::ReadBytes(dir + "/log/slurmd.log");
  }
  void TearDown() override {
    slurmd_.reset();
    slurmctld_.reset();
    munged_.reset();
    unsetenv("SLURM_CONF");
  }

  std::string Local(const std::string& out, int ps, int workers) {
    auto r = testing::Run(
        {kBin + "/een-launch", "--ps", std::to_string(ps), "--workers", std::to_string(workers),
         "--", kBin + "/equivalence_train", "--steps", "400", "--out", base_ / out},
        seconds(120));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return testing::ReadBytes(base_ / out);
  }
  std::map<std::string, std::string> Secret() {
    return {{"EEN_JOB_SECRET", std::string(64, 'a') + std::to_string(getpid())}};
  }

  testing::ScratchFolder base_{"slurm-test"};
  std::unique_ptr<testing::Subprocess> munged_, slurmctld_, slurmd_;
};

TEST_F(Slurm, SrunStartsOneLauncherPerNodeThatNeedsNoOtherFlag) {
  const std::string expected = Local("local.bin", 2, 2);
  ASSERT_FALSE(expected.empty());
  auto r = testing::Run(
      {"srun", "-N1", "--ntasks-per-node=1", kBin + "/een-launch", "--ps", "2", "--workers", "2",
       "--", kBin + "/equivalence_train", "--steps", "400", "--out", base_ / "srun.bin"},
      seconds(180), Secret());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[een-launch node 0] node 0 of 1 ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("waiting for the rendezvous at localhost:"), std::string::npos);
  EXPECT_TRUE(testing::ReadBytes(base_ / "srun.bin") == expected)
      << "srun trained differently from the local backend";
}

TEST_F(Slurm, TheSampleBatchScriptRunsAJob) {
  const std::string expected = Local("local.bin", 2, 2);
  auto r =
      testing::Run({"sbatch", "-N1", "--wait", "-o", base_ / "job.out",
                    "--export=ALL,EEN_LAUNCH=" + kBin + "/een-launch,EEN_PS=2,EEN_WORKERS=2",
                    std::string(EEN_SOURCE_DIR) + "/launcher/slurm/een.sbatch",
                    kBin + "/equivalence_train", "--steps", "400", "--out", base_ / "sbatch.bin"},
                   seconds(180));
  const std::string out = testing::ReadBytes(base_ / "job.out");
  ASSERT_EQ(r.exit_code, 0) << r.output << out;
  EXPECT_NE(out.find("job finished: 2 of 2 workers of this node succeeded"), std::string::npos)
      << out;
  EXPECT_TRUE(testing::ReadBytes(base_ / "sbatch.bin") == expected);
}

TEST_F(Slurm, SeveralTasksPerNodeAreRefusedSayingHowToRunIt) {
  auto r = testing::Run(
      {"srun", "-N1", "-n2", kBin + "/een-launch", "--ps", "1", "--workers", "1", "--", "true"},
      seconds(60), Secret());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("use `srun --ntasks-per-node=1 een-launch ...`"), std::string::npos)
      << r.output;
}

// What srun sets on each of three nodes, given to one een-launch per
// simulated host: ranks node-rank-major, node 0 the list's first host.
TEST_F(Slurm, ThreeNodesFromTheirSlurmVariablesTrainAsOneHost) {
  testing::SimulatedHosts hosts(3);
  ASSERT_TRUE(hosts.ok()) << hosts.why_not();
  const std::string expected = Local("local3.bin", 3, 3);
  const std::string first = hosts.Address(0);
  const std::string list = first.substr(0, first.rfind('.')) + ".[1-3]";
  std::vector<std::unique_ptr<testing::Subprocess>> nodes;
  for (int n = 0; n < 3; ++n) {
    auto env = Secret();
    env.insert({{"SLURM_PROCID", std::to_string(n)},
                {"SLURM_NODEID", std::to_string(n)},
                {"SLURM_NNODES", "3"},
                {"SLURM_NTASKS", "3"},
                {"SLURM_JOB_ID", "77"},
                {"SLURM_STEP_NODELIST", ""},
                {"SLURM_JOB_NODELIST", list}});
    nodes.push_back(std::make_unique<testing::Subprocess>(
        hosts.In(n, {kBin + "/een-launch", "--ps", "3", "--workers", "3", "--",
                     kBin + "/equivalence_train", "--steps", "400", "--out", base_ / "vars.bin"}),
        env));
  }
  for (int n = 0; n < 3; ++n) {
    auto code = nodes[n]->Wait(seconds(180));
    ASSERT_TRUE(code.has_value()) << nodes[n]->output();
    EXPECT_EQ(*code, 0) << nodes[n]->output();
    EXPECT_NE(nodes[n]->output().find("waiting for the rendezvous at " + first + ":29577"),
              std::string::npos)
        << nodes[n]->output();
    EXPECT_NE(nodes[n]->output().find("[worker " + std::to_string(n) + "]"), std::string::npos);
  }
  EXPECT_TRUE(testing::ReadBytes(base_ / "vars.bin") == expected)
      << "three Slurm nodes trained differently from one host";
}

}  // namespace
}  // namespace een
