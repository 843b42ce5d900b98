// ProcessRates: what eenctl status shows as a process's CPU and bytes per
// second, from the running counters of its heartbeats.
#include "launcher/process_rates.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

namespace een {
namespace {

using Clock = ProcessRates::Clock;
using std::chrono::milliseconds;

struct Beat {
  capnp::MallocMessageBuilder message;
  wire::Heartbeat::Builder hb = message.initRoot<wire::Heartbeat>();
  Beat(std::vector<std::pair<int, std::pair<uint64_t, uint64_t>>> traffic) {
    auto list = hb.initTraffic(traffic.size());
    for (size_t i = 0; i < traffic.size(); ++i) {
      list[i].setPs(traffic[i].first);
      list[i].setBytesIn(traffic[i].second.first);
      list[i].setBytesOut(traffic[i].second.second);
    }
  }
};

std::vector<MetricSample> Counters(double cpu_micros, double pulled, double pushed) {
  return {{"process.cpu_micros", cpu_micros, true},
          {"worker.pull_bytes", pulled, true},
          {"worker.push_bytes", pushed, true}};
}

TEST(ProcessRates, RatesOverTheWindowAndZeroBeforeIt) {
  ProcessRates rates(milliseconds(1000));
  const Clock::time_point t0 = Clock::now();
  Beat b0({{0, {0, 0}}, {1, {0, 0}}});
  rates.Note(t0, wire::Role::WORKER, Counters(0, 0, 0), b0.hb.asReader().getTraffic(), 2, 0);
  Beat b1({{0, {500, 100}}, {1, {0, 0}}});
  rates.Note(t0 + milliseconds(500), wire::Role::WORKER, Counters(250'000, 500, 100),
             b1.hb.asReader().getTraffic(), 2, 10);
  EXPECT_EQ(rates.cpu_percent(), 0);  // the window has not passed yet
  Beat b2({{0, {2000, 400}}, {1, {1000, 0}}});
  rates.Note(t0 + milliseconds(2000), wire::Role::WORKER, Counters(1'000'000, 3000, 400),
             b2.hb.asReader().getTraffic(), 2, 64);
  EXPECT_DOUBLE_EQ(rates.cpu_percent(), 50);  // 1 s of CPU in 2 s
  EXPECT_DOUBLE_EQ(rates.bytes().in, 1500);
  EXPECT_DOUBLE_EQ(rates.bytes().out, 200);
  EXPECT_DOUBLE_EQ(rates.samples_per_second(), 32);
  ASSERT_EQ(rates.per_ps().size(), 2u);
  EXPECT_DOUBLE_EQ(rates.per_ps().at(0).in, 1000);
  EXPECT_DOUBLE_EQ(rates.per_ps().at(0).out, 200);
  EXPECT_DOUBLE_EQ(rates.per_ps().at(1).in, 500);
}

TEST(ProcessRates, ACounterGoingBackStartsOverAndLyingRanksAreIgnored) {
  ProcessRates rates(milliseconds(1000));
  const Clock::time_point t0 = Clock::now();
  Beat lies({{0, {100, 100}}, {7, {5, 5}}, {-1, {5, 5}}});
  rates.Note(t0, wire::Role::WORKER, Counters(1e6, 100, 100), lies.hb.asReader().getTraffic(), 2);
  Beat later({{0, {300, 100}}, {7, {9, 9}}, {-1, {9, 9}}});
  rates.Note(t0 + milliseconds(1000), wire::Role::WORKER, Counters(2e6, 300, 100),
             later.hb.asReader().getTraffic(), 2);
  ASSERT_EQ(rates.per_ps().size(), 1u);  // ranks -1 and 7 are not PS of a 2-PS job
  EXPECT_DOUBLE_EQ(rates.per_ps().at(0).in, 200);

  // A new process on the rank: its counters start from zero, no negative rate.
  Beat fresh({});
  rates.Note(t0 + milliseconds(2000), wire::Role::WORKER, Counters(1000, 0, 0),
             fresh.hb.asReader().getTraffic(), 2);
  EXPECT_GE(rates.cpu_percent(), 0);
  EXPECT_GE(rates.bytes().in, 0);
}

}  // namespace
}  // namespace een
