// Metrics (common/metrics.h): what a role registers is what its heartbeat
// carries, and what a peer sends is checked before the coordinator keeps it.
#include "common/metrics.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

namespace een {
namespace {

TEST(Metrics, CountersAndGaugesTravelInTheHeartbeatUnchanged) {
  Metrics m;
  Counter& pushes = m.counter("ps.pushes");
  m.gauge("worker.sync_ms").Set(2.5);
  pushes.Add(3);
  EXPECT_EQ(&m.counter("ps.pushes"), &pushes);  // one metric per name
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) pushes.Add();
    });
  }
  for (auto& t : threads) t.join();

  capnp::MallocMessageBuilder b;
  auto hb = b.initRoot<wire::Heartbeat>();
  m.ToWire(hb);
  auto read = Metrics::FromWire(hb.asReader().getMetrics());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].name, "ps.pushes");
  EXPECT_EQ((*read)[0].value, 4003);
  EXPECT_TRUE((*read)[0].counter);
  EXPECT_EQ((*read)[1].name, "worker.sync_ms");
  EXPECT_EQ((*read)[1].value, 2.5);
  EXPECT_FALSE((*read)[1].counter);
}

TEST(Metrics, APeerCannotSendTooManyOrBadNames) {
  capnp::MallocMessageBuilder b;
  auto hb = b.initRoot<wire::Heartbeat>();
  auto list = hb.initMetrics(Metrics::kMaxWireMetrics + 1);
  for (size_t i = 0; i < list.size(); ++i) list[i].setName("m" + std::to_string(i));
  auto many = Metrics::FromWire(hb.asReader().getMetrics());
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(many.status().message().find("more than " + std::to_string(Metrics::kMaxWireMetrics)),
            std::string::npos);

  for (const std::string& bad : {std::string(), std::string(65, 'a'), std::string("Upper"),
                                 std::string("new\nline"), std::string("nul\0x", 5)}) {
    capnp::MallocMessageBuilder one;
    auto h = one.initRoot<wire::Heartbeat>();
    h.initMetrics(1)[0].setName(capnp::Text::Reader(bad.data(), bad.size()));
    EXPECT_FALSE(Metrics::FromWire(h.asReader().getMetrics()).ok()) << "name '" << bad << "'";
  }
}

TEST(Metrics, ARoleCannotRegisterABadNameOrTooMany) {
  Metrics m;
  EXPECT_THROW(m.counter("Bad Name"), std::logic_error);
  m.counter("x");
  EXPECT_THROW(m.gauge("x"), std::logic_error);  // one name, one kind
  for (size_t i = 1; i < Metrics::kMaxMetrics; ++i) m.counter("c" + std::to_string(i));
  EXPECT_THROW(m.counter("one_too_many"), std::logic_error);
  EXPECT_EQ(m.Snapshot().size(), Metrics::kMaxMetrics);
}

}  // namespace
}  // namespace een
