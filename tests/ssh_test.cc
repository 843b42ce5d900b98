// The ssh backend (issue 13): `een-launch --hostfile FILE --ps N --workers M
// -- PROGRAM` on one host starts the job on every host of the file over
// OpenSSH. Each simulated host (a network namespace, support/
// simulated_hosts.h) runs an sshd the test starts, with a host key and a
// user key it generates; een-launch runs in host 0 and reaches the others
// with that key (--ssh-args), as a user's own keys would. A job trains
// bitwise as on one host with every line prefixed by its host and role;
// Ctrl-C, a failing program and an unreachable host each end it on every
// host; and no process of the job is left on any host afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <tuple>

#include "support/files.h"
#include "support/scratch_folder.h"
#include "support/simulated_hosts.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;
constexpr int kHosts = 3;

class Ssh : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, sshd)";
    if (!std::filesystem::exists("/usr/sbin/sshd")) {
      GTEST_SKIP() << "/usr/sbin/sshd is not installed (openssh-server)";
    }
    hosts_ = std::make_unique<testing::SimulatedHosts>(kHosts);
    ASSERT_TRUE(hosts_->ok()) << hosts_->why_not();
    std::filesystem::create_directories("/run/sshd");  // sshd's privilege separation folder
    for (const char* key : {"hostkey", "userkey"}) {
      auto r = testing::Run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", base_ / key},
                            seconds(30));
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    std::filesystem::copy_file(base_ / "userkey.pub", base_ / "authorized_keys");
    for (int h = 0; h < kHosts; ++h) {
      const std::string conf = base_ / ("sshd" + std::to_string(h) + ".conf");
      std::ofstream(conf) << "Port 22\nListenAddress " << hosts_->Address(h) << "\nHostKey "
                          << base_ / "hostkey"
                          << "\nAuthorizedKeysFile " << base_ / "authorized_keys"
                          << "\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                             "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                             "PidFile "
                          << base_ / ("sshd" + std::to_string(h) + ".pid") << "\n";
      // -D: in the foreground, so the host's processes include it, and it
      // dies with the namespace's cleanup.
      sshd_.push_back(std::make_unique<testing::Subprocess>(
          hosts_->In(h, {"/usr/sbin/sshd", "-D", "-e", "-f", conf})));
    }
    // Ready once host 0 can run a command on every host.
    for (int h = 0; h < kHosts; ++h) {
      auto r = testing::Run(
          hosts_->In(
              0, {"sh", "-c",
                  "for i in $(seq 100); do ssh -o BatchMode=yes -o ConnectTimeout=2 " + SshArgs() +
                      " " + hosts_->Address(h) + " true && exit 0; sleep 0.1; done; exit 1"}),
          seconds(60));
      ASSERT_EQ(r.exit_code, 0) << "sshd on host " << h << " does not answer: " << r.output;
    }
  }

  std::string SshArgs() const {
    return "-i " + base_ / "userkey" +
           " -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
           "-o ConnectTimeout=3";
  }
  // The hostfile: host 1 takes two workers.
  std::string Hostfile(const std::string& extra_line = "") const {
    const std::string path = base_ / "hosts.txt";
    std::ofstream(path) << "# three hosts\n"
                        << hosts_->Address(0) << " slots=1\n"
                        << hosts_->Address(1) << " slots=2  # two workers here\n"
                        << hosts_->Address(2) << "\n"
                        << extra_line;
    return path;
  }
  std::vector<std::string> Job(const std::vector<std::string>& program,
                               const std::string& hostfile) const {
    std::vector<std::string> argv = {kBin + "/een-launch",
                                     "--hostfile",
                                     hostfile,
                                     "--ps",
                                     "3",
                                     "--workers",
                                     "4",
                                     "--ssh-args",
                                     SshArgs(),
                                     "--progress-interval",
                                     "200ms",
                                     "--"};
    argv.insert(argv.end(), program.begin(), program.end());
    return hosts_->In(0, argv);
  }
  // Only the sshd is left on each host (polled: processes take a moment to go).
  void ExpectNothingButSshdLeft() const {
    for (int h = 0; h < kHosts; ++h) {
      std::vector<pid_t> pids;
      for (int i = 0; i < 100; ++i) {
        pids = hosts_->Pids(h);
        if (pids.size() <= 1) break;
        usleep(50000);
      }
      EXPECT_EQ(pids.size(), 1u) << "processes of the job left on host " << h;
    }
  }

  testing::ScratchFolder base_{"ssh-test"};
  std::unique_ptr<testing::SimulatedHosts> hosts_;
  std::vector<std::unique_ptr<testing::Subprocess>> sshd_;
};

std::vector<std::string> Train(const std::string& out, int steps) {
  return {kBin + "/equivalence_train", "--steps", std::to_string(steps), "--out", out};
}

TEST_F(Ssh, AHostfileJobTrainsBitwiseAsOneHostWithEveryLineNamingItsHost) {
  auto local =
      testing::Run({kBin + "/een-launch", "--ps", "3", "--workers", "4", "--",
                    kBin + "/equivalence_train", "--steps", "500", "--out", base_ / "local.bin"},
                   seconds(120));
  ASSERT_EQ(local.exit_code, 0) << local.output;
  // What the user set where they typed the command reaches every worker on
  // every host (the job trains bitwise as on one host only then, when the
  // environment picks BLAS kernels: OPENBLAS_CORETYPE).
  std::vector<std::string> program = {
      "/bin/sh", "-c",
      "test \"$EEN_TEST_FORWARDED\" = \"two words 'quoted'\" || "
      "{ echo \"EEN_TEST_FORWARDED is '$EEN_TEST_FORWARDED'\"; exit 7; }; "
      "test \"$DISPLAY\" = \":7\" || { echo \"DISPLAY is '$DISPLAY'\"; exit 8; }; exec \"$@\"",
      "sh"};
  for (const std::string& a : Train(base_ / "ssh.bin", 500)) program.push_back(a);
  std::vector<std::string> job = Job(program, Hostfile());
  const auto launcher = std::find(job.begin(), job.end(), kBin + "/een-launch");
  ASSERT_NE(launcher, job.end());
  job.insert(launcher, {"env", "EEN_TEST_FORWARDED=two words 'quoted'"});
  // --env forwards even a variable of the session's own (as mpirun -x).
  job.insert(std::find(job.begin(), job.end(), kBin + "/een-launch") + 1, {"--env", "DISPLAY=:7"});
  auto r = testing::Run(job, seconds(180));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::ReadBytes(base_ / "ssh.bin") == testing::ReadBytes(base_ / "local.bin"))
      << "the job over ssh trained differently from one host";
  // Workers fill the slots in order: 0 on host 0, 1 and 2 on host 1, 3 on host 2.
  const std::vector<std::pair<std::string, int>> placed = {
      {"worker 0", 0}, {"worker 1", 1}, {"worker 2", 1}, {"worker 3", 2},
      {"ps 0", 0},     {"ps 1", 1},     {"ps 2", 2},     {"coordinator", 0}};
  for (const auto& [role, host] : placed) {
    EXPECT_NE(r.output.find("[" + hosts_->Address(host) + " " + role + "] "), std::string::npos)
        << role << " on host " << host << "\n"
        << r.output;
  }
  EXPECT_NE(r.output.find("[een-launch] job finished on every host"), std::string::npos);
  ExpectNothingButSshdLeft();
}

TEST_F(Ssh, AnUnchangedGlooDdpScriptRunsOnEveryHostWithPs0) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  // PyTorch's DDP tutorial as is: torchrun's variables on every host, the
  // c10d store node 0's een-launch hosts, gloo moving the gradients.
  std::vector<std::string> job =
      Job({"/usr/bin/python3", std::string(EEN_SOURCE_DIR) + "/tests/python/ddp_tutorial.py"},
          Hostfile());
  const auto ps = std::find(job.begin(), job.end(), "--ps");
  ASSERT_NE(ps, job.end());
  *(ps + 1) = "0";
  auto r = testing::Run(job, seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("rank 0 of 4: done, checksum (\\S+)")))
      << r.output;
  for (const auto& [rank, host] :
       std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {2, 1}, {3, 2}}) {
    EXPECT_NE(
        r.output.find("[" + hosts_->Address(host) + " worker " + std::to_string(rank) + "] rank " +
                      std::to_string(rank) + " of 4: done, checksum " + m[1].str()),
        std::string::npos)
        << "rank " << rank << " on host " << host << "\n"
        << r.output;
  }
  EXPECT_NE(r.output.find("[een-launch] job finished on every host"), std::string::npos);
  ExpectNothingButSshdLeft();
}

TEST_F(Ssh, ADdpScriptTrainsThroughThePsOnEveryHostWithBackendEen) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  // The same tutorial with init_process_group("een"): its collectives go
  // through the PS spread over the three hosts.
  const std::string script =
      "import een, runpy, sys; sys.argv = ['t', '--backend', 'een']; "
      "runpy.run_path('" +
      std::string(EEN_SOURCE_DIR) + "/tests/python/ddp_tutorial.py', run_name='__main__')";
  std::vector<std::string> job = Job({"/usr/bin/python3", "-c", script}, Hostfile());
  const auto launcher = std::find(job.begin(), job.end(), kBin + "/een-launch");
  ASSERT_NE(launcher, job.end());
  job.insert(launcher, {"env", "PYTHONPATH=" + std::string(EEN_BIN_DIR) + "/../python"});
  auto r = testing::Run(job, seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("rank 0 of 4: done, checksum (\\S+)")))
      << r.output;
  for (int rank = 1; rank < 4; ++rank) {
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " of 4: done, checksum " + m[1].str()),
              std::string::npos)
        << r.output;
  }
  EXPECT_NE(r.output.find("of torch.distributed's een backend"), std::string::npos) << r.output;
  ExpectNothingButSshdLeft();
}

TEST_F(Ssh, WithMaxRestartsAFailedRankRestartsEveryWorkerOnEveryHost) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  // torchrun's restart across hosts: a rank fails (on host 1 under gloo, on host 2 under the een
  // backend), every node stops its workers and starts them again with the next
  // TORCHELASTIC_RESTART_COUNT, and the script resumes from its own checkpoint. Under the een
  // backend the run ends bitwise where an undisturbed one does (the PS sum in rank order);
  // gloo's ring sums 4 ranks in an order that depends on DDP's bucket layout, which a new DDP
  // resets for one step: there it ends within float rounding.
  const std::string script = std::string(EEN_SOURCE_DIR) + "/tests/python/restart_train.py";
  auto train = [&](const std::string& name, const std::string& backend,
                   const std::vector<std::string>& fail) {
    std::vector<std::string> program = {
        "/usr/bin/python3",       script,  "--backend",           backend, "--checkpoint",
        base_ / (name + ".ckpt"), "--out", base_ / (name + ".pt")};
    program.insert(program.end(), fail.begin(), fail.end());
    std::vector<std::string> job = Job(program, Hostfile());
    const auto ps = std::find(job.begin(), job.end(), "--ps");
    if (backend == "gloo") *(ps + 1) = "0";
    job.insert(ps, {"--max-restarts", "1"});
    const auto launcher = std::find(job.begin(), job.end(), kBin + "/een-launch");
    job.insert(launcher, {"env", "PYTHONPATH=" + std::string(EEN_BIN_DIR) + "/../python"});
    return testing::Run(job, seconds(300));
  };
  auto checksum = [](const std::string& output) {
    std::smatch m;
    return std::regex_search(output, m,
                             std::regex("done at step 12, attempt [01], checksum (\\S+)"))
               ? m[1].str()
               : "none";
  };
  for (const auto& [backend, rank, host] :
       std::vector<std::tuple<std::string, int, int>>{{"gloo", 2, 1}, {"een", 3, 2}}) {
    auto undisturbed = train("undisturbed-" + backend, backend, {});
    ASSERT_EQ(undisturbed.exit_code, 0) << undisturbed.output;
    auto r = train("restarted-" + backend, backend,
                   {"--fail-rank", std::to_string(rank), "--fail-step", "5"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // Every node says the cause, and starts its workers again.
    for (int h = 0; h < kHosts; ++h) {
      EXPECT_TRUE(std::regex_search(
          r.output, std::regex("\\[" + hosts_->Address(h) + " een-launch node " +
                               std::to_string(h) + "\\] .*rank " + std::to_string(rank) +
                               " fails at step 5[^\\n]*; stopping every process to start the "
                               "whole job again, every worker with TORCHELASTIC_RESTART_COUNT=1 "
                               "\\(restart 1 of 1, on every node")))
          << backend << ": host " << h << "\n"
          << r.output;
    }
    EXPECT_NE(r.output.find("rank 3 attempt 1 resumes at step 5"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("[een-launch] job finished on every host"), std::string::npos);
    if (backend == "een") {
      EXPECT_EQ(checksum(r.output), checksum(undisturbed.output)) << r.output;
      continue;
    }
    auto close = testing::Run(
        {"/usr/bin/python3", "-c",
         "import sys, torch; a, b = (torch.load(f) for f in sys.argv[1:]); "
         "sys.exit(0 if all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in a) "
         "else 'differ')",
         base_ / "undisturbed-gloo.pt", base_ / "restarted-gloo.pt"},
        seconds(60));
    EXPECT_EQ(close.exit_code, 0) << close.output;
  }
  ExpectNothingButSshdLeft();
}

TEST_F(Ssh, CtrlCEndsTheJobOnEveryHostAndLeavesNoProcess) {
  testing::Subprocess job(Job(Train(base_ / "long.bin", 10000000), Hostfile()));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(90))) << job.output();
  job.Signal(SIGINT);
  auto code = job.Wait(seconds(60));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 130) << job.output();
  for (int h = 0; h < kHosts; ++h) {
    EXPECT_TRUE(std::regex_search(job.output(), std::regex("\\[" + hosts_->Address(h) +
                                                           " een-launch node [0-9]\\] job "
                                                           "(interrupted|failed)")))
        << "host " << h << "\n"
        << job.output();
  }
  ExpectNothingButSshdLeft();
}

TEST_F(Ssh, AFailingProgramEndsTheJobOnEveryHostNamingIt) {
  auto r =
      testing::Run(Job({kBin + "/equivalence_train", "--no-such-flag"}, Hostfile()), seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // The verdict names the worker that failed first, whichever host reports it.
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("\\[een-launch\\] job failed: [0-9.]+: .*worker [0-9] \\(pid [0-9]+\\) "
                           "exited with status 106")))
      << r.output;
  ExpectNothingButSshdLeft();
}

TEST_F(Ssh, AnUnreachableHostEndsTheJobSayingWhy) {
  const std::string nowhere = hosts_->Address(7);  // on the bridge's subnet, but no host
  auto r = testing::Run(Job(Train(base_ / "x.bin", 100), Hostfile(nowhere + "\n")), seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(
      r.output.find("[een-launch] job failed: " + nowhere + ": ssh: connect to host " + nowhere),
      std::string::npos)
      << r.output;
  ExpectNothingButSshdLeft();
}

TEST_F(Ssh, BadHostfilesAreRefusedNamingTheLine) {
  const std::string path = base_ / "bad.txt";
  std::ofstream(path) << "hostA slots=2\nhostB slots=many\n";
  auto r = testing::Run(
      {kBin + "/een-launch", "--hostfile", path, "--ps", "1", "--workers", "1", "--", "true"},
      seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(path + " line 2: field 2 is not slots=N"), std::string::npos) << r.output;
  // Not a host name: an ssh option in disguise, or binary bytes.
  for (const std::string& host : {std::string("-oProxyCommand=x"), std::string("h\x01\xff")}) {
    std::ofstream(path) << "hostA\n" << host << "\n";
    auto odd = testing::Run(
        {kBin + "/een-launch", "--hostfile", path, "--ps", "1", "--workers", "1", "--", "true"},
        seconds(30));
    EXPECT_EQ(odd.exit_code, 2) << odd.output;
    EXPECT_NE(odd.output.find(path + " line 2: its first field is not a host name or address"),
              std::string::npos)
        << odd.output;
  }
  std::ofstream(path) << "hostA slots=1\n";
  auto full = testing::Run(
      {kBin + "/een-launch", "--hostfile", path, "--ps", "1", "--workers", "3", "--", "true"},
      seconds(30));
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.output.find("3 workers need more slots than the 1 the hostfile gives"),
            std::string::npos)
      << full.output;
}

}  // namespace
}  // namespace een
