// A network partition, not a crash: a worker, or a PS, runs in a network
// namespace of this test's own, linked to the host by a veth pair; the test
// cuts the link (`ip link set ... down`), checks that the coordinator detects
// it and the job goes on (without the worker; with the PS's shards failed
// over to their backups), then restores the link and checks that the stale
// process is refused (it learns it was declared lost) and nothing is
// corrupted. Needs root and iproute2; skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>

#include "support/files.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

bool Sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// A namespace with one veth pair: host side 10.213.N.1, namespace side .2.
class TestHost {
 public:
  TestHost() {
    const std::string id = std::to_string(getpid() % 250);
    ns_ = "een-part-" + id;
    host_if_ = "eenh" + id;
    ns_if_ = "eenn" + id;
    host_ip_ = "10.213." + id + ".1";
    ns_ip_ = "10.213." + id + ".2";
    const std::string& ns_ip = ns_ip_;
    ok_ = geteuid() == 0 && Sh("ip netns add " + ns_) &&
          Sh("ip link add " + host_if_ + " type veth peer name " + ns_if_) &&
          Sh("ip link set " + ns_if_ + " netns " + ns_) &&
          Sh("ip addr add " + host_ip_ + "/30 dev " + host_if_) &&
          Sh("ip link set " + host_if_ + " up") &&
          Sh("ip netns exec " + ns_ + " ip addr add " + ns_ip + "/30 dev " + ns_if_) &&
          Sh("ip netns exec " + ns_ + " ip link set " + ns_if_ + " up") &&
          Sh("ip netns exec " + ns_ + " ip link set lo up");
  }
  ~TestHost() {
    Sh("ip netns del " + ns_);
    Sh("ip link del " + host_if_);
  }
  bool ok() const { return ok_; }
  const std::string& ns() const { return ns_; }
  const std::string& host_ip() const { return host_ip_; }
  const std::string& ns_ip() const { return ns_ip_; }
  bool SetLink(bool up) {
    return Sh("ip netns exec " + ns_ + " ip link set " + ns_if_ + (up ? " up" : " down"));
  }

 private:
  bool ok_ = false;
  std::string ns_, host_if_, ns_if_, host_ip_, ns_ip_;
};

TEST(Partition, CutOffWorkerIsDetectedAndRefusedWhenItComesBack) {
  TestHost host;
  if (!host.ok()) GTEST_SKIP() << "needs root and `ip netns` (iproute2)";
  // Worker 2 runs inside the namespace; everything else on the host side.
  const std::string wrapper = "if [ \"$EEN_RANK\" = 2 ]; then exec ip netns exec " + host.ns() +
                              " \"$0\" \"$@\"; else exec \"$0\" \"$@\"; fi";
  testing::Subprocess job({kBin + "/een-launch",
                           "--ps",
                           "2",
                           "--workers",
                           "3",
                           "--min-workers",
                           "2",
                           "--host",
                           host.host_ip(),
                           "--progress-interval",
                           "200ms",
                           "--",
                           "/bin/sh",
                           "-c",
                           wrapper,
                           kBin + "/equivalence_train",
                           "--steps",
                           "4000",
                           "--out",
                           "/tmp/een-partition-" + std::to_string(getpid())});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(host.SetLink(false));
  ASSERT_TRUE(job.WaitForOutput("the job goes on with 2 workers", seconds(10))) << job.output();
  const auto detected = std::chrono::steady_clock::now() - cut;
  RecordProperty("detection_ms",
                 std::to_string(std::chrono::duration_cast<milliseconds>(detected).count()));
  EXPECT_LT(detected, milliseconds(500 + 1000));
  EXPECT_TRUE(std::regex_search(job.output(),
                                std::regex("worker 2 \\(host [^,]+, pid [0-9]+\\) silent for")))
      << job.output();
  ASSERT_TRUE(job.WaitForOutput("membership 1: from step", seconds(10))) << job.output();

  ASSERT_TRUE(host.SetLink(true));
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  // Back on the network, the stale worker is told it is out, and stops.
  EXPECT_TRUE(std::regex_search(job.output(), std::regex("\\[worker 2\\].*declared lost")))
      << job.output();
  EXPECT_NE(job.output().find("job finished: 2 of 3 workers succeeded"), std::string::npos)
      << job.output();
  std::remove(("/tmp/een-partition-" + std::to_string(getpid())).c_str());
}

// The same job, started by hand as on several hosts (een-launch keeps every
// PS on one host): coordinator, PS 0 and 2 and both workers on the host
// side, PS 1 in the namespace. Three PS, two copies of each shard.
class ManualJob {
 public:
  ManualJob(const TestHost& host, const std::string& out)
      : secret_(testing::WriteJobSecret(out + ".secret")) {
    coordinator_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{kBin + "/een-coordinator", "--ps", "3", "--workers", "2",
                                 "--replicas", "2", "--progress-ms", "200", "--listen",
                                 "tcp://" + host.host_ip() + ":0"},
        std::map<std::string, std::string>{{"EEN_JOB_SECRET_FILE", secret_}});
    std::smatch m;
    for (int i = 0; i < 100 && address_.empty(); ++i) {
      coordinator_->WaitForOutput("\n", milliseconds(100));
      const std::string& o = coordinator_->output();
      if (std::regex_search(o, m, std::regex("(tcp://[0-9.]+:[0-9]+)\n"))) address_ = m[1];
    }
    for (int r = 0; r < 3; ++r) {
      std::vector<std::string> argv = {kBin + "/een-ps"};
      if (r == 1) argv = {"ip", "netns", "exec", host.ns(), kBin + "/een-ps"};
      ps_.push_back(std::make_unique<testing::Subprocess>(
          argv, Env("ps", r, r == 1 ? host.ns_ip() : host.host_ip())));
    }
    for (int r = 0; r < 2; ++r) {
      workers_.push_back(std::make_unique<testing::Subprocess>(
          std::vector<std::string>{kBin + "/equivalence_train", "--optimizer", "adam", "--steps",
                                   "4000", "--out", out + "." + std::to_string(r)},
          Env("worker", r, host.host_ip())));
    }
  }
  bool started() const { return !address_.empty(); }
  testing::Subprocess& coordinator() { return *coordinator_; }
  testing::Subprocess& ps(int r) { return *ps_[r]; }
  testing::Subprocess& worker(int r) { return *workers_[r]; }
  std::string Output() const {
    std::string all = "coordinator:\n" + coordinator_->output();
    for (size_t r = 0; r < ps_.size(); ++r)
      all += "ps " + std::to_string(r) + ":\n" + ps_[r]->output();
    for (size_t r = 0; r < workers_.size(); ++r)
      all += "worker " + std::to_string(r) + ":\n" + workers_[r]->output();
    return all;
  }

 private:
  std::map<std::string, std::string> Env(const std::string& role, int rank, const std::string& ip) {
    return {
        {"EEN_COORDINATOR", address_}, {"EEN_ROLE", role},       {"EEN_RANK", std::to_string(rank)},
        {"EEN_WORLD_SIZE", "2"},       {"EEN_NUM_PS", "3"},      {"EEN_HOST", ip},
        {"EEN_DATA_TRANSPORT", "tcp"}, {"OMP_NUM_THREADS", "1"}, {"EEN_JOB_SECRET_FILE", secret_}};
  }
  std::string secret_;  // the job's, written by the test as een-launch would
  std::string address_;
  std::unique_ptr<testing::Subprocess> coordinator_;
  std::vector<std::unique_ptr<testing::Subprocess>> ps_, workers_;
};

TEST(Partition, CutOffPsFailsOverAndIsRefusedWhenItComesBack) {
  TestHost host;
  if (!host.ok()) GTEST_SKIP() << "needs root and `ip netns` (iproute2)";
  const std::string out = "/tmp/een-partition-ps-" + std::to_string(getpid());
  // The same job undisturbed, for the bitwise comparison.
  std::string expected;
  {
    ManualJob whole(host, out + ".whole");
    ASSERT_TRUE(whole.started()) << whole.Output();
    ASSERT_EQ(whole.worker(0).Wait(seconds(120)), 0) << whole.Output();
    ASSERT_EQ(whole.coordinator().Wait(seconds(30)), 0) << whole.Output();
    expected = testing::ReadBytes(out + ".whole.0");
    ASSERT_FALSE(expected.empty());
  }
  ManualJob job(host, out + ".cut");
  ASSERT_TRUE(job.started()) << job.Output();
  ASSERT_TRUE(job.coordinator().WaitForOutput("progress: step", seconds(60))) << job.Output();
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(host.SetLink(false));
  ASSERT_TRUE(job.coordinator().WaitForOutput("failing over", seconds(10))) << job.Output();
  const auto detected = std::chrono::steady_clock::now() - cut;
  RecordProperty("ps_detection_ms",
                 std::to_string(std::chrono::duration_cast<milliseconds>(detected).count()));
  EXPECT_TRUE(std::regex_search(job.coordinator().output(),
                                std::regex("ps 1 \\(host [^,]+, pid [0-9]+\\) silent for")))
      << job.Output();
  // Training goes on without it: the workers move to the new primaries.
  ASSERT_TRUE(job.worker(0).WaitForOutput("new primaries", seconds(10))) << job.Output();
  ASSERT_TRUE(host.SetLink(true));  // before the cut-off PS gives up on the coordinator
  ASSERT_EQ(job.worker(0).Wait(seconds(120)), 0) << job.Output();
  ASSERT_EQ(job.worker(1).Wait(seconds(120)), 0) << job.Output();
  ASSERT_EQ(job.coordinator().Wait(seconds(30)), 0) << job.Output();
  // The old PS learnt it was declared lost, or gave up on its own; either
  // way it stopped, and nothing it held or sent changed the result.
  auto ps_code = job.ps(1).Wait(seconds(30));
  ASSERT_TRUE(ps_code.has_value()) << job.Output();
  EXPECT_NE(*ps_code, 0);
  EXPECT_TRUE(job.ps(1).output().find("declared lost") != std::string::npos ||
              job.ps(1).output().find("silent for") != std::string::npos)
      << job.Output();
  EXPECT_EQ(testing::ReadBytes(out + ".cut.0"), expected)
      << "parameters differ after the partition";
  for (const char* suffix : {".whole.0", ".whole.1", ".cut.0", ".cut.1"})
    std::remove((out + suffix).c_str());
}

}  // namespace
}  // namespace een
