// When the coordinator counts a silent process as lost (launcher/liveness.h):
// a process whose heartbeats came on time is lost just past the failover
// threshold; one whose heartbeats came late and irregularly (a busy machine)
// gets more room, at most 3x the threshold; the coordinator's own stalls are
// not the process's silence. Times are given, not measured: no sleeps.
#include "launcher/liveness.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace een
