// When the coordinator counts a silent process as lost (launcher/liveness.h):
// a process whose heartbeats came on time is lost just past the failover
// threshold; one whose heartbeats came late and irregularly (a busy machine)
// gets more room, at most 3x the threshold; the coordinator's own stalls are
// not the process's silence. Times are given, not measured: no sleeps.
// Past the allowance, /proc tells a slow process from a lost one
// (launcher/process_sighting.h): real child processes, sleeping, busy,
// stopped, dead, or on another host.
#include "launcher/liveness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/job_env.h"
#include "launcher/process_sighting.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using Clock = Liveness::Clock;
constexpr milliseconds kThreshold(500);

TEST(Liveness, RegularHeartbeatsAreLostJustPastTheThreshold) {
  const Clock::time_point t0 = Clock::now();
  Liveness l;
  l.Restart(t0);
  Clock::time_point t = t0;
  for (int i = 0; i < 50; ++i) l.Heard(t += milliseconds(100 + i % 3));
  EXPECT_EQ(l.AllowanceMs(kThreshold), 500);
  EXPECT_FALSE(l.Lost(t + milliseconds(500), kThreshold));
  EXPECT_TRUE(l.Lost(t + milliseconds(501), kThreshold));
}

TEST(Liveness, IrregularHeartbeatsGetMoreRoomUpToThreeTimesTheThreshold) {
  const Clock::time_point t0 = Clock::now();
  Liveness jittery;
  jittery.Restart(t0);
  Clock::time_point t = t0;
  // A loaded machine: most heartbeats on time, every fourth 400 ms late.
  for (int i = 0; i < 40; ++i) jittery.Heard(t += milliseconds(i % 4 == 3 ? 500 : 100));
  const long allowance = jittery.AllowanceMs(kThreshold);
  EXPECT_GT(allowance, 600) << "a 567 ms silence on such a machine is not a loss";
  EXPECT_LE(allowance, 1500);
  EXPECT_FALSE(jittery.Lost(t + milliseconds(567), kThreshold));
  EXPECT_TRUE(jittery.Lost(t + milliseconds(allowance + 1), kThreshold));

  Liveness wild;  // gaps of seconds: still lost within 3x the threshold
  wild.Restart(t0);
  t = t0;
  for (int i = 0; i < 40; ++i) wild.Heard(t += milliseconds(i % 2 ? 3000 : 10));
  EXPECT_EQ(wild.AllowanceMs(kThreshold), 1500);
  EXPECT_TRUE(wild.Lost(t + milliseconds(1501), kThreshold));
}

TEST(Liveness, TheLatestGapsCountAndOldOnesAreForgotten) {
  const Clock::time_point t0 = Clock::now();
  Liveness l;
  l.Restart(t0);
  Clock::time_point t = t0;
  for (int i = 0; i < 40; ++i) l.Heard(t += milliseconds(i % 4 == 3 ? 500 : 100));
  ASSERT_GT(l.AllowanceMs(kThreshold), 500);
  for (int i = 0; i < 32; ++i) l.Heard(t += milliseconds(100));  // the load is gone
  EXPECT_EQ(l.AllowanceMs(kThreshold), 500);
}

TEST(Liveness, RestartIsNoGapAndTheCoordinatorsStallIsForgiven) {
  const Clock::time_point t0 = Clock::now();
  Liveness l;
  l.Restart(t0);
  Clock::time_point t = t0;
  for (int i = 0; i < 10; ++i) l.Heard(t += milliseconds(100));
  // Registered again 10 s later (a replacement): that pause is no heartbeat gap.
  l.Restart(t += milliseconds(10000));
  l.Heard(t += milliseconds(100));
  EXPECT_EQ(l.AllowanceMs(kThreshold), 500);
  // The coordinator's loop stalled 300 ms (a slow fsync): 700 ms of silence
  // of which it listened 400.
  l.Forgive(milliseconds(300));
  EXPECT_EQ(l.SilentMs(t + milliseconds(700)), 400);
  EXPECT_FALSE(l.Lost(t + milliseconds(700), kThreshold));
  EXPECT_TRUE(l.Lost(t + milliseconds(801), kThreshold));
}

TEST(Liveness, BeforeAnyHeartbeatTheThresholdHolds) {
  const Clock::time_point t0 = Clock::now();
  Liveness l;
  l.Restart(t0);
  EXPECT_EQ(l.AllowanceMs(kThreshold), 500);
  EXPECT_TRUE(l.Lost(t0 + milliseconds(501), kThreshold));
  l.Heard(t0 + milliseconds(100));  // one heartbeat: no gap yet
  EXPECT_EQ(l.AllowanceMs(kThreshold), 500);
}

// A child running `/bin/sh -c script`, killed and reaped at the end.
class Child {
 public:
  explicit Child(const char* script) {
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", script, static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void Reap() {
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

using State = ProcessSighting::State;

// Polls until `pid` is seen in `state` (a new child takes a moment to exec).
bool Becomes(pid_t pid, State state) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    if (SightProcess(pid, HostName()).state == state) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

TEST(ProcessSighting, ASleepingProcessIsIdleABusyOneRunsAndUsesCpu) {
  Child sleeper("exec sleep 60");
  EXPECT_TRUE(Becomes(sleeper.pid(), State::kIdle));
  Child busy("while :; do :; done");
  ASSERT_TRUE(Becomes(busy.pid(), State::kRunnable));
  const uint64_t before = SightProcess(busy.pid(), HostName()).cpu;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (SightProcess(busy.pid(), HostName()).cpu == before && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_GT(SightProcess(busy.pid(), HostName()).cpu, before);
}

TEST(ProcessSighting, StoppedDeadAndElsewhereAreSaid) {
  Child child("exec sleep 60");
  ASSERT_TRUE(Becomes(child.pid(), State::kIdle));
  ASSERT_EQ(kill(child.pid(), SIGSTOP), 0);
  EXPECT_TRUE(Becomes(child.pid(), State::kStopped));
  ASSERT_EQ(kill(child.pid(), SIGKILL), 0);
  EXPECT_TRUE(Becomes(child.pid(), State::kGone));  // a zombie until reaped
  const pid_t pid = child.pid();
  child.Reap();
  EXPECT_EQ(SightProcess(pid, HostName()).state, State::kGone);
  // The same pid named by another host's registration is not this one.
  EXPECT_EQ(SightProcess(getpid(), HostName() + "-elsewhere").state, State::kElsewhere);
  EXPECT_STREQ(SightingName(State::kStopped), "stopped");
}

}  // namespace
}  // namespace een
