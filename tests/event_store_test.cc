// EventStore: the coordinator keeps every process's flight-recorder events
// in its own clock, refuses a peer's lies whole, and says which steps it no
// longer holds whole.
#include "launcher/event_store.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

namespace een {
namespace {

struct Beat {
  capnp::MallocMessageBuilder message;
  wire::Heartbeat::Builder hb = message.initRoot<wire::Heartbeat>();
  explicit Beat(const std::vector<RecordedEvent>& events) {
    auto list = hb.initEvents(events.size());
    for (size_t i = 0; i < events.size(); ++i) FlightRecorder::ToWire(events[i], list[i]);
  }
  capnp::List<wire::TraceEvent>::Reader events() { return hb.asReader().getEvents(); }
};

RecordedEvent Event(uint64_t step, int64_t at, EventKind kind = EventKind::kPushSent) {
  return {at, at + 5, step, 1, 2, 3, kind};
}

TEST(EventStore, KeepsEventsInTheCoordinatorsClockByStep) {
  EventStore store;
  Beat beat({Event(1, 100), Event(2, 200), Event(3, 300)});
  ASSERT_TRUE(store.Add(wire::Role::WORKER, 0, 42, "h0", 1000, beat.events(), 0).ok());
  capnp::MallocMessageBuilder message;
  auto report = message.initRoot<wire::TraceReport>();
  store.ToWire(2, 3, report);
  ASSERT_EQ(report.getProcesses().size(), 1u);
  auto p = report.getProcesses()[0];
  EXPECT_EQ(p.getHost(), "h0");
  EXPECT_EQ(p.getPid(), 42);
  ASSERT_EQ(p.getEvents().size(), 2u);
  EXPECT_EQ(p.getEvents()[0].getStep(), 2u);
  EXPECT_EQ(p.getEvents()[0].getBeginMicros(), 1200);  // shifted to the coordinator's clock
  EXPECT_EQ(p.getEvents()[1].getEndMicros(), 1305);
  EXPECT_EQ(store.OldestWholeStep(), 0u);
}

TEST(EventStore, APeersBadEventsAreRefusedWhole) {
  EventStore store;
  Beat unknown({Event(1, 100), Event(1, 100, EventKind::kCount)});
  EXPECT_FALSE(store.Add(wire::Role::PS, 0, 7, "h", 0, unknown.events(), 0).ok());
  RecordedEvent backwards = Event(1, 100);
  backwards.end_us = 50;
  Beat reversed({backwards});
  EXPECT_FALSE(store.Add(wire::Role::PS, 0, 7, "h", 0, reversed.events(), 0).ok());
  Beat fine({Event(1, 100)});
  EXPECT_FALSE(store.Add(wire::Role::PS, 0, 7, "h", int64_t{1} << 62, fine.events(), 0).ok());
  EXPECT_TRUE(store.empty());  // nothing of them was kept
  std::vector<RecordedEvent> many(FlightRecorder::kMaxPending + 1, Event(1, 100));
  Beat flood(many);
  EXPECT_FALSE(store.Add(wire::Role::PS, 0, 7, "h", 0, flood.events(), 0).ok());
}

TEST(EventStore, KeepsTheNewestEventsAndSaysWhichStepsAreNoLongerWhole) {
  EventStore store;
  std::vector<RecordedEvent> events;
  for (uint64_t step = 0; step < 40; ++step) {
    for (int k = 0; k < 1024; ++k) events.push_back(Event(step, static_cast<int64_t>(step)));
  }
  for (size_t at = 0; at < events.size(); at += 4096) {
    Beat beat(std::vector<RecordedEvent>(events.begin() + at,
                                         events.begin() + std::min(at + 4096, events.size())));
    ASSERT_TRUE(store.Add(wire::Role::WORKER, 1, 9, "h", 0, beat.events(), 0).ok());
  }
  // 40 steps of 1024 events, 32768 kept: steps 0-7 went.
  EXPECT_EQ(store.OldestWholeStep(), 8u);
}

}  // namespace
}  // namespace een
