// A network partition, not a crash: worker 2 runs in a network namespace of
// this test's own, linked to the host by a veth pair; the test cuts the link
// (`ip link set ... down`), checks that the coordinator detects it and the job
// goes on without that worker, then restores the link and checks that the
// stale worker is refused (it learns it was declared lost) and the job ends
// cleanly. Needs root and iproute2; skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <regex>

#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

bool Sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

// A namespace with one veth pair: host side 10.213.N.1, namespace side .2.
class TestHost {
 public:
  TestHost() {
    const std::string id = std::to_string(getpid() % 250);
    ns_ = "een-part-" + id;
    host_if_ = "eenh" + id;
    ns_if_ = "eenn" + id;
    host_ip_ = "10.213." + id + ".1";
    const std::string ns_ip = "10.213." + id + ".2";
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
  bool SetLink(bool up) {
    return Sh("ip netns exec " + ns_ + " ip link set " + ns_if_ + (up ? " up" : " down"));
  }

 private:
  bool ok_ = false;
  std::string ns_, host_if_, ns_if_, host_ip_;
};

TEST(Partition, CutOffWorkerIsDetectedAndRefusedWhenItComesBack) {
  TestHost host;
  if (!host.ok()) GTEST_SKIP() << "needs root and `ip netns` (iproute2)";
  // Worker 2 runs inside the namespace; everything else on the host side.
  const std::string wrapper =
      "if [ \"$EEN_RANK\" = 2 ]; then exec ip netns exec " + host.ns() +
      " \"$0\" \"$@\"; else exec \"$0\" \"$@\"; fi";
  testing::Subprocess job({kBin + "/een-launch", "--ps", "2", "--workers", "3", "--min-workers",
                           "2", "--host", host.host_ip(), "--progress-interval", "200ms", "--",
                           "/bin/sh", "-c", wrapper, kBin + "/equivalence_train", "--steps",
                           "4000", "--out", "/tmp/een-partition-" + std::to_string(getpid())});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(host.SetLink(false));
  ASSERT_TRUE(job.WaitForOutput("the job goes on with 2 workers", seconds(10))) << job.output();
  const auto detected = std::chrono::steady_clock::now() - cut;
  RecordProperty("detection_ms", std::to_string(
      std::chrono::duration_cast<milliseconds>(detected).count()));
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

}  // namespace
}  // namespace een
