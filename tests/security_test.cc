// Only the job's own processes can touch the job (issue 11): a process
// outside the job, with no secret or a wrong one, is refused by every role
// before any message is read, and the job ends bitwise as an undisturbed
// one; a worker holds only its own credential; a member may speak only for
// the identity it authenticated as; a role
// without the secret says how to get it; eenctl finds it on this machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "support/files.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

class Security : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = "/tmp/een-security-test-" + std::to_string(getpid());
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
  }
  void TearDown() override { std::filesystem::remove_all(base_); }
  std::vector<std::string> Job(const std::string& out, std::vector<std::string> launch = {}) {
    std::vector<std::string> argv = {kBin + "/een-launch",  "--ps", "2", "--workers", "2",
                                     "--progress-interval", "200ms"};
    argv.insert(argv.end(), launch.begin(), launch.end());
    argv.insert(argv.end(), {"--", kBin + "/semantics_train", "--out", base_ + "/" + out,
                             "--no-dropout", "--steps", "6000"});
    return argv;
  }
  std::string Rank0(const std::string& out) {
    return testing::ReadBytes(base_ + "/" + out + ".rank-0.bin");
  }
  // Every PS data address the job's output names.
  static std::vector<std::string> PsAddresses(const std::string& output) {
    std::vector<std::string> out;
    std::regex re("data plane: [a-z ]+ on (tcp://[0-9.]+:[0-9]+)");
    for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
         it != std::sregex_iterator(); ++it) {
      out.push_back((*it)[1]);
    }
    return out;
  }
  std::string base_;
};

TEST_F(Security, StrangersAreRefusedEverywhereAndChangeNothing) {
  auto whole = testing::Run(Job("whole"), seconds(180));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  testing::Subprocess job(Job("poked"));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  const std::vector<std::string> ps = PsAddresses(job.output());
  ASSERT_FALSE(coordinator.empty()) << job.output();
  ASSERT_EQ(ps.size(), 2u) << job.output();
  const std::string wrong = testing::WriteJobSecret(base_ + "/wrong-secret");
  for (const std::string& secret : {std::string(), wrong}) {
    std::vector<std::string> extra;
    if (!secret.empty()) extra = {"--secret-file", secret, "--identity", "worker:0"};
    for (const std::string& address : ps) {
      std::vector<std::string> argv = {
          kBin + "/stranger_client", "--address", address, "--to", "ps", "--wait-ms", "700"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto r = testing::Run(argv, seconds(30));
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("no answer"), std::string::npos) << r.output;  // not even an error
    }
    std::vector<std::string> argv = {kBin + "/stranger_client",
                                     "--address",
                                     coordinator,
                                     "--to",
                                     "coordinator",
                                     "--wait-ms",
                                     "700"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = testing::Run(argv, seconds(30));
    EXPECT_NE(r.output.find("no answer"), std::string::npos) << r.output;
  }
  // The strangers came while the job trained (else they proved nothing).
  EXPECT_EQ(job.output().find("job finished"), std::string::npos) << job.output();
  auto code = job.Wait(seconds(180));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("refused a connection on tcp://127.0.0.1"), std::string::npos)
      << job.output();  // no credentials at all
  EXPECT_NE(job.output().find("refused a connection from 127.0.0.1"), std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("claiming 'worker:0'"), std::string::npos) << job.output();
  const std::string whole_rank0 = Rank0("whole"), poked_rank0 = Rank0("poked");
  ASSERT_FALSE(whole_rank0.empty());
  EXPECT_TRUE(poked_rank0 == whole_rank0)
      << "a stranger changed the training: rank 0 wrote " << poked_rank0.size()
      << " bytes, against " << whole_rank0.size() << " undisturbed\n"
      << job.output();
}

// A worker holds only its own credential, not the job's secret: its
// environment names its credential file, which holds no secret; with it,
// a process is refused as the launcher, eenctl, a PS and another worker,
// and even as itself it speaks only for itself: worker 1's identity cannot
// push for worker 0 or forge messages at the coordinator (each refused by
// name). The job ends as usual.
TEST_F(Security, AWorkerHoldsOnlyItsOwnCredentialAndSpeaksOnlyForItself) {
  testing::Subprocess job(Job("member"));
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const std::string secret = testing::JobSecretFile(job.output());
  const std::vector<std::string> ps = PsAddresses(job.output());
  ASSERT_FALSE(secret.empty()) << job.output();
  ASSERT_FALSE(ps.empty()) << job.output();
  const std::string run = std::filesystem::path(secret).parent_path();
  const std::string own = run + "/credentials/worker-1";
  const std::string secret_text = testing::ReadBytes(secret);
  const std::string own_text = testing::ReadBytes(own);
  ASSERT_FALSE(own_text.empty()) << own;
  EXPECT_EQ(own_text.find(secret_text.substr(0, 32)), std::string::npos)
      << "a worker's credential holds the job's secret";
  // Each worker of this job has its own file in its environment, no secret.
  int workers_seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string environ = testing::ReadBytes(entry.path().string() + "/environ");
    if (environ.find("EEN_RUN_DIR=" + run + '\0') == std::string::npos ||
        environ.find("EEN_ROLE=worker") == std::string::npos) {
      continue;
    }
    ++workers_seen;
    EXPECT_EQ(environ.find("EEN_JOB_SECRET_FILE=/"), std::string::npos) << entry.path();
    EXPECT_NE(environ.find("EEN_JOB_CREDENTIAL_FILE=" + run + "/credentials/worker-"),
              std::string::npos)
        << entry.path();
  }
  EXPECT_GE(workers_seen, 1) << "no worker of the job found in /proc";
  // With worker 1's credential, as any other identity: refused at the handshake.
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  for (const std::string identity : {"launcher", "eenctl", "ps:0", "worker:0", "coordinator"}) {
    auto r = testing::Run({kBin + "/stranger_client", "--address", coordinator, "--to",
                           "coordinator", "--credential-file", own, "--identity", identity},
                          seconds(40));
    EXPECT_NE(r.output.find("refused this process's credentials"), std::string::npos)
        << identity << ": " << r.output;
    EXPECT_EQ(r.output.find("answer:"), std::string::npos) << identity << ": " << r.output;
  }
  auto at_ps =
      testing::Run({kBin + "/stranger_client", "--address", ps[0], "--to", "ps",
                    "--credential-file", own, "--identity", "worker:0", "--as-worker", "0"},
                   seconds(40));
  EXPECT_NE(at_ps.output.find("refused this process's credentials"), std::string::npos)
      << at_ps.output;
  // As itself it gets in, and speaks only for itself.
  auto r = testing::Run({kBin + "/stranger_client", "--address", ps[0], "--to", "ps",
                         "--credential-file", own, "--identity", "worker:1", "--as-worker", "0"},
                        seconds(30));
  EXPECT_NE(r.output.find("authenticated as 'worker:1' and cannot speak for 'worker:0'"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("epoch"), std::string::npos) << "the refusal told the job's state";
  // At the coordinator: forged `done` for workers 0 and 1, a heartbeat for
  // PS 0, a drain and a snapshot request, all from a worker's identity (here
  // with the secret, as a process on this host can read it: per host, the
  // guarantee is the identity each message may speak for).
  auto c = testing::Run({kBin + "/stranger_client", "--address", coordinator, "--to", "coordinator",
                         "--secret-file", secret, "--identity", "worker:7"},
                        seconds(30));
  EXPECT_NE(c.output.find("cannot speak for 'worker:0'"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("cannot speak for 'worker:1'"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("cannot speak for 'ps:0'"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("only eenctl may ask for this"), std::string::npos) << c.output;
  auto code = job.Wait(seconds(180));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 0) << job.output();
}

// A role started by hand without the secret says how to get it; eenctl
// without one finds none for an address no job on this machine has.
TEST_F(Security, WithoutTheSecretEveryEntryPointSaysHowToGetIt) {
  auto ps = testing::Run({kBin + "/een-ps"}, seconds(30),
                         {{"EEN_COORDINATOR", "tcp://127.0.0.1:1"},
                          {"EEN_ROLE", "ps"},
                          {"EEN_RANK", "0"},
                          {"EEN_WORLD_SIZE", "1"},
                          {"EEN_NUM_PS", "1"},
                          {"EEN_JOB_SECRET_FILE", ""},
                          {"EEN_INSECURE", ""}});
  EXPECT_EQ(ps.exit_code, 2) << ps.output;
  EXPECT_NE(ps.output.find("een-ps has no job secret: EEN_JOB_SECRET_FILE is not set."),
            std::string::npos)
      << ps.output;
  auto ctl = testing::Run({kBin + "/eenctl", "snapshot", "--coordinator", "tcp://127.0.0.1:1"},
                          seconds(30), {{"EEN_JOB_SECRET_FILE", ""}});
  EXPECT_EQ(ctl.exit_code, 2) << ctl.output;
  EXPECT_NE(ctl.output.find("cannot find the secret of the job at tcp://127.0.0.1:1"),
            std::string::npos)
      << ctl.output;
  // A secret file others can read is refused.
  const std::string open = testing::WriteJobSecret(base_ + "/open-secret");
  std::filesystem::permissions(open, std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  auto loose = testing::Run({kBin + "/een-ps"}, seconds(30),
                            {{"EEN_COORDINATOR", "tcp://127.0.0.1:1"},
                             {"EEN_ROLE", "ps"},
                             {"EEN_RANK", "0"},
                             {"EEN_WORLD_SIZE", "1"},
                             {"EEN_NUM_PS", "1"},
                             {"EEN_JOB_SECRET_FILE", open}});
  EXPECT_EQ(loose.exit_code, 2) << loose.output;
  EXPECT_NE(loose.output.find("must belong to this user and be readable by it only"),
            std::string::npos)
      << loose.output;
}

// --insecure: no secret, a warning at the start, and the job still trains.
TEST_F(Security, InsecureJobsSayWhatTheyRisk) {
  auto r = testing::Run(Job("insecure", {"--insecure"}), seconds(180));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--insecure: no job secret; any process on this host can connect"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("job secret in"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace een
