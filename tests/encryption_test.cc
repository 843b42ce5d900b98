// Encryption beyond loopback (issue 11): a job whose roles listen on an
// address beyond loopback speaks CURVE on every connection. Checked in a
// network namespace of its own (an address 10.77.0.1 on its loopback
// device, so nothing leaves the machine), with a raw-socket sniffer on that
// device: the same job on 127.0.0.1 shows its members' identities in clear
// (PLAIN), the one on 10.77.0.1 shows none; a stranger with the wrong secret
// or none gets no answer, a member speaks only for itself, and the job ends
// bitwise as the one on loopback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "support/files.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

class Encryption : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = "een-enc-" + std::to_string(getpid());
    if (geteuid() != 0) GTEST_SKIP() << "needs root, for a network namespace (ip netns)";
    for (const std::vector<std::string>& step :
         {std::vector<std::string>{"ip", "netns", "add", ns_},
          {"ip", "-n", ns_, "link", "set", "lo", "up"},
          {"ip", "-n", ns_, "addr", "add", "10.77.0.1/32", "dev", "lo"}}) {
      auto r = testing::Run(step, seconds(30));
      ASSERT_EQ(r.exit_code, 0) << "cannot set up the network namespace (iproute2 installed?): "
                                << r.output;
    }
    made_ns_ = true;
  }
  void TearDown() override {
    if (made_ns_) testing::Run({"ip", "netns", "del", ns_}, seconds(30));
  }
  std::vector<std::string> InNamespace(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_});
    return argv;
  }
  // Worker 0 holds the job at step 300 until `gate` exists (none: no hold).
  std::vector<std::string> Job(const std::string& host, const std::string& out,
                               const std::string& gate = "") const {
    std::vector<std::string> argv = {kBin + "/een-launch",
                                     "--ps",
                                     "2",
                                     "--workers",
                                     "2",
                                     "--host",
                                     host,
                                     "--progress-interval",
                                     "200ms",
                                     "--",
                                     kBin + "/semantics_train",
                                     "--out",
                                     base_ / out,
                                     "--no-dropout",
                                     "--steps",
                                     "600"};
    if (!gate.empty()) {
      argv.insert(argv.end(), {"--stall-rank", "0", "--stall-at", "300", "--stall-until", gate});
    }
    return InNamespace(argv);
  }
  std::string Rank0(const std::string& out) const {
    return testing::ReadBytes(base_ / out + ".rank-0.bin");
  }
  // "packets N matching M" from a sniffer stopped now.
  static std::pair<long, long> Stop(testing::Subprocess& sniffer) {
    sniffer.Signal(SIGTERM);
    EXPECT_TRUE(sniffer.Wait(seconds(10)).has_value());
    std::smatch m;
    const std::string& out = sniffer.output();
    if (!std::regex_search(out, m, std::regex("packets ([0-9]+) matching ([0-9]+)"))) {
      ADD_FAILURE() << "the sniffer said: " << out;
      return {0, 0};
    }
    return {std::stol(m[1]), std::stol(m[2])};
  }
  testing::ScratchFolder base_{"encryption-test"};
  std::string ns_;
  bool made_ns_ = false;
};

TEST_F(Encryption, BeyondLoopbackEveryConnectionIsEncryptedAndAuthenticated) {
  // On loopback (PLAIN): the sniffer sees the identities, so it works.
  {
    testing::Subprocess sniffer(InNamespace({kBin + "/loopback_sniffer", "worker:"}));
    ASSERT_TRUE(sniffer.WaitForOutput("capturing", seconds(30))) << sniffer.output();
    auto plain = testing::Run(Job("127.0.0.1", "plain"), seconds(240));
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    const auto [packets, matching] = Stop(sniffer);
    EXPECT_GT(matching, 0) << packets << " packets, none in clear: the sniffer proves nothing";
  }
  testing::Subprocess sniffer(InNamespace({kBin + "/loopback_sniffer", "worker:"}));
  ASSERT_TRUE(sniffer.WaitForOutput("capturing", seconds(30))) << sniffer.output();
  const std::string gate = base_ / "strangers-done";
  testing::Subprocess job(Job("10.77.0.1", "encrypted", gate));
  ASSERT_TRUE(job.WaitForOutput("hangs at step 300", seconds(90))) << job.output();
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  const std::string secret = testing::JobSecretFile(job.output());
  ASSERT_EQ(coordinator.rfind("tcp://10.77.0.1:", 0), 0u) << job.output();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      job.output(), m, std::regex("data plane: [a-z ]+ on (tcp://10\\.77\\.0\\.1:[0-9]+)")))
      << job.output();
  const std::string ps = m[1];

  // Strangers: no secret, then a wrong one. Not even an error comes back.
  const std::string wrong = testing::WriteJobSecret(base_ / "wrong-secret");
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"--secret-file", wrong, "--identity", "worker:0"}}) {
    for (const auto& [address, to] : {std::pair{ps, "ps"}, {coordinator, "coordinator"}}) {
      std::vector<std::string> argv = {
          kBin + "/stranger_client", "--address", address, "--to", to, "--wait-ms", "700"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto r = testing::Run(InNamespace(argv), seconds(30));
      EXPECT_NE(r.output.find("no answer"), std::string::npos) << r.output;
    }
  }
  // A member speaks only for the identity inside its encrypted handshake.
  auto member = testing::Run(
      InNamespace({kBin + "/stranger_client", "--address", ps, "--to", "ps", "--secret-file",
                   secret, "--identity", "worker:1", "--as-worker", "0"}),
      seconds(30));
  EXPECT_NE(member.output.find("authenticated as 'worker:1' and cannot speak for 'worker:0'"),
            std::string::npos)
      << member.output;
  // eenctl with the wrong secret is told so, fast.
  auto ctl = testing::Run(InNamespace({kBin + "/eenctl", "--secret-file", wrong, "snapshot",
                                       "--coordinator", coordinator}),
                          seconds(30));
  EXPECT_NE(ctl.exit_code, 0);
  EXPECT_NE(ctl.output.find("is not this job's secret"), std::string::npos) << ctl.output;

  // Every stranger above met a running job: worker 0 held it until now.
  job.WaitUntil([](const std::string&) { return false; }, std::chrono::milliseconds(0));
  EXPECT_EQ(job.output().find("job finished"), std::string::npos) << "the strangers came late";
  std::ofstream(gate).put('\n');
  auto code = job.Wait(seconds(240));
  ASSERT_TRUE(code.has_value()) << job.output();
  ASSERT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("does not hold this job's secret"), std::string::npos)
      << job.output();
  const auto [packets, matching] = Stop(sniffer);
  EXPECT_GT(packets, 100) << "the sniffer saw no traffic";
  EXPECT_EQ(matching, 0) << "an identity travelled in clear";
  ASSERT_FALSE(Rank0("plain").empty());
  EXPECT_EQ(Rank0("encrypted"), Rank0("plain")) << "encryption changed the training";
}

}  // namespace
}  // namespace een
