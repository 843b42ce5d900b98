// A PS's side of the een backend's collectives (ps/collective_table.h):
// results reduced in rank order whatever the arrival order, gathers and
// broadcasts laid out as torch's, and contributions that lie or disagree
// refused with the reason, to everyone concerned; a member the job goes on
// without (--min-workers) is absent from its groups' sums, scaled to the
// group; and parts orphaned by a lost PS are dropped.
#include "ps/collective_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace een {
namespace {

template <typename T>
CollectiveContribution Part(int rank, int of, const std::vector<T>& values, wire::ElementType dtype,
                            wire::ReduceOp op = wire::ReduceOp::SUM) {
  CollectiveContribution c;
  c.group = 7;
  c.seq = 1;
  c.rank = rank;
  c.contributors = of;
  c.op = op;
  c.dtype = dtype;
  c.numel = values.size();
  c.total = values.size();
  c.from = "worker-" + std::to_string(rank);
  c.data = reinterpret_cast<const std::byte*>(values.data());
  c.bytes = values.size() * sizeof(T);
  return c;
}

template <typename T>
std::vector<T> Values(const transport::Frame& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

TEST(CollectiveTable, SumsInRankOrderWhateverTheArrivalOrder) {
  // 1e8 + 1 - 1e8 in float: the order decides, and it is always rank order.
  const std::vector<float> r0 = {1e8f}, r1 = {1.0f}, r2 = {-1e8f};
  CollectiveTable forward(1 << 20), backward(1 << 20);
  ASSERT_FALSE(forward.Add(Part(0, 3, r0, wire::ElementType::F32))->has_value());
  ASSERT_FALSE(forward.Add(Part(1, 3, r1, wire::ElementType::F32))->has_value());
  auto a = forward.Add(Part(2, 3, r2, wire::ElementType::F32));
  ASSERT_FALSE(backward.Add(Part(2, 3, r2, wire::ElementType::F32))->has_value());
  ASSERT_FALSE(backward.Add(Part(1, 3, r1, wire::ElementType::F32))->has_value());
  auto b = backward.Add(Part(0, 3, r0, wire::ElementType::F32));
  ASSERT_TRUE(a.ok() && a->has_value() && b.ok() && b->has_value());
  EXPECT_EQ(Values<float>((*a)->result), Values<float>((*b)->result));
  EXPECT_EQ(Values<float>((*a)->result)[0], (1e8f + 1.0f) + -1e8f);
  EXPECT_EQ((*a)->to, (std::vector<transport::PeerId>{"worker-0", "worker-1", "worker-2"}));
  EXPECT_EQ(forward.bytes_held(), 0u);
  EXPECT_EQ(forward.parts_waiting(), 0u);
}

TEST(CollectiveTable, EveryOpAndIntegersWrapAsTorchs) {
  CollectiveTable t(1 << 20);
  const std::vector<int32_t> a = {3, -4, 2147483647}, b = {5, 6, 1};
  for (auto [op, expect] : std::vector<std::pair<wire::ReduceOp, std::vector<int32_t>>>{
           {wire::ReduceOp::SUM, {8, 2, -2147483647 - 1}},
           {wire::ReduceOp::PRODUCT, {15, -24, 2147483647}},
           {wire::ReduceOp::MIN, {3, -4, 1}},
           {wire::ReduceOp::MAX, {5, 6, 2147483647}}}) {
    auto c0 = Part(0, 2, a, wire::ElementType::I32, op);
    auto c1 = Part(1, 2, b, wire::ElementType::I32, op);
    c0.seq = c1.seq = static_cast<uint64_t>(op) + 10;
    ASSERT_FALSE(t.Add(c0)->has_value());
    auto done = t.Add(c1);
    ASSERT_TRUE(done.ok() && done->has_value());
    EXPECT_EQ(Values<int32_t>((*done)->result), expect) << static_cast<int>(op);
  }
}

TEST(CollectiveTable, GatherIsRankMajorAndBroadcastIsTheRoots) {
  CollectiveTable t(1 << 20);
  const std::vector<double> a = {1, 2}, b = {3, 4};
  ASSERT_FALSE(t.Add(Part(1, 2, b, wire::ElementType::F64, wire::ReduceOp::GATHER))->has_value());
  auto g = t.Add(Part(0, 2, a, wire::ElementType::F64, wire::ReduceOp::GATHER));
  ASSERT_TRUE(g.ok() && g->has_value());
  EXPECT_EQ(Values<double>((*g)->result), (std::vector<double>{1, 2, 3, 4}));

  auto root = Part(1, 2, b, wire::ElementType::F64, wire::ReduceOp::BROADCAST);
  auto other = Part(0, 2, std::vector<double>{}, wire::ElementType::F64, wire::ReduceOp::BROADCAST);
  root.seq = other.seq = 2;
  root.root = other.root = 1;
  other.numel = other.total = 2;  // receives two elements, sends none
  ASSERT_FALSE(t.Add(other)->has_value());
  auto r = t.Add(root);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(Values<double>((*r)->result), b);
}

TEST(CollectiveTable, LiesAndDisagreementsAreRefusedNamingWhy) {
  CollectiveTable t(64);
  const std::vector<float> four = {1, 2, 3, 4};
  auto short_payload = Part(0, 2, four, wire::ElementType::F32);
  short_payload.bytes = 12;
  EXPECT_NE(t.Add(short_payload).status().message().find("12 bytes for 4 elements"),
            std::string::npos);
  auto beyond = Part(0, 2, four, wire::ElementType::F32);
  beyond.offset = ~uint64_t{0} - 1;  // offset + numel would wrap
  beyond.total = ~uint64_t{0};
  EXPECT_NE(t.Add(beyond).status().message().find("beyond the tensor"), std::string::npos);
  auto bad_rank = Part(5, 2, four, wire::ElementType::F32);
  EXPECT_NE(t.Add(bad_rank).status().message().find("rank 5 of a group of 2"), std::string::npos);
  // Two members that disagree on the op: both told, and the third too.
  ASSERT_FALSE(t.Add(Part(0, 3, four, wire::ElementType::F32))->has_value());
  auto twice = t.Add(Part(0, 3, four, wire::ElementType::F32));
  EXPECT_NE(twice.status().message().find("rank 0 sent part 0 of call 1 twice"), std::string::npos);
  auto mismatch = t.Add(Part(1, 3, four, wire::ElementType::F32, wire::ReduceOp::MAX));
  ASSERT_TRUE(mismatch.ok() && mismatch->has_value());
  EXPECT_NE((*mismatch)->error.find("rank 0 called sum (all_reduce) and rank 1 max"),
            std::string::npos)
      << (*mismatch)->error;
  EXPECT_EQ((*mismatch)->to.size(), 2u);
  EXPECT_EQ(t.bytes_held(), 0u);
  auto late = t.Add(Part(2, 3, four, wire::ElementType::F32));
  ASSERT_TRUE(late.ok() && late->has_value());
  EXPECT_EQ((*late)->to, std::vector<transport::PeerId>{"worker-2"});
  EXPECT_EQ(t.parts_waiting(), 0u);
  // Over the byte cap (64 here): refused, nothing held.
  const std::vector<float> big(32, 1.0f);
  auto over = t.Add(Part(0, 2, big, wire::ElementType::F32));
  ASSERT_TRUE(over.ok() && over->has_value());
  EXPECT_NE((*over)->error.find("cap of 64"), std::string::npos);
  EXPECT_EQ(t.bytes_held(), 0u);
}

TEST(CollectiveTable, AMemberThatLeftTheJobFailsItsGroupsPartsAtOnce) {
  CollectiveTable t(1 << 20);
  const std::vector<float> v = {1, 2};
  // Worker 1 of the whole job has not sent its part when it leaves.
  ASSERT_FALSE(t.Add(Part(0, 2, v, wire::ElementType::F32))->has_value());
  // A subgroup of workers 0 and 2 waits for worker 2 only.
  auto sub = Part(0, 2, v, wire::ElementType::F32);
  sub.group = 9;
  sub.members = {0, 2};
  ASSERT_FALSE(t.Add(sub)->has_value());
  const std::vector<CollectiveResult> failed = t.WorkerLeft(1);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].group, 7u);
  EXPECT_EQ(failed[0].to, std::vector<transport::PeerId>{"worker-0"});
  EXPECT_NE(failed[0].error.find("worker 1 left the job"), std::string::npos) << failed[0].error;
  // A later call of a group with worker 1 fails at its first part.
  auto later = Part(0, 2, v, wire::ElementType::F32);
  later.seq = 2;
  auto refused = t.Add(later);
  ASSERT_TRUE(refused.ok() && refused->has_value());
  EXPECT_NE((*refused)->error.find("worker 1 left the job"), std::string::npos);
  // The subgroup without worker 1 completes.
  auto sub2 = sub;
  sub2.rank = 1;
  sub2.from = "worker-2";
  auto done = t.Add(sub2);
  ASSERT_TRUE(done.ok() && done->has_value());
  EXPECT_TRUE((*done)->error.empty());
  EXPECT_EQ(Values<float>((*done)->result), (std::vector<float>{2, 4}));
}

TEST(CollectiveTable, AMemberLostIsAbsentAndFloatSumsAreScaledToTheGroup) {
  CollectiveTable t(1 << 20);
  const std::vector<float> r0 = {1, 2}, r1 = {3, 4};
  ASSERT_FALSE(t.Add(Part(0, 3, r0, wire::ElementType::F32))->has_value());
  ASSERT_FALSE(t.Add(Part(1, 3, r1, wire::ElementType::F32))->has_value());
  // Worker 2 is lost before sending: the call completes over ranks 0 and 1,
  // scaled by 3 / 2 (DDP divides by 3: the survivors' mean).
  std::vector<CollectiveResult> done = t.WorkerLost(2);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].error.empty()) << done[0].error;
  EXPECT_EQ(Values<float>(done[0].result), (std::vector<float>{6, 9}));
  EXPECT_EQ(done[0].absent, std::vector<int32_t>{2});
  EXPECT_EQ(done[0].to, (std::vector<transport::PeerId>{"worker-0", "worker-1"}));
  EXPECT_TRUE(t.WorkerLeft(2).empty());  // it is gone, not failing anyone
  // Later calls complete without it; integers are not scaled.
  const std::vector<int32_t> i0 = {5}, i1 = {7};
  auto a = Part(0, 3, i0, wire::ElementType::I32);
  auto b = Part(1, 3, i1, wire::ElementType::I32);
  a.seq = b.seq = 2;
  ASSERT_FALSE(t.Add(a)->has_value());
  auto sum = t.Add(b);
  ASSERT_TRUE(sum.ok() && sum->has_value());
  EXPECT_EQ(Values<int32_t>((*sum)->result), std::vector<int32_t>{12});
  // A broadcast from it cannot be: the members hear why.
  auto c = Part(0, 3, std::vector<float>{}, wire::ElementType::F32, wire::ReduceOp::BROADCAST);
  auto d = Part(1, 3, std::vector<float>{}, wire::ElementType::F32, wire::ReduceOp::BROADCAST);
  c.seq = d.seq = 3;
  c.root = d.root = 2;
  c.numel = d.numel = c.total = d.total = 2;
  ASSERT_FALSE(t.Add(c)->has_value());
  auto root_lost = t.Add(d);
  ASSERT_TRUE(root_lost.ok() && root_lost->has_value());
  EXPECT_NE((*root_lost)
                ->error.find("worker 2 was lost before sending its part (the broadcast's "
                             "root)"),
            std::string::npos)
      << (*root_lost)->error;
  // Worker 2 itself, if it was only slow, is told it was declared lost.
  auto late = Part(2, 3, r0, wire::ElementType::F32);
  late.seq = 4;
  auto refused = t.Add(late);
  ASSERT_TRUE(refused.ok() && refused->has_value());
  EXPECT_NE((*refused)->error.find("declared lost"), std::string::npos);
  EXPECT_EQ(t.parts_waiting(), 0u);
  EXPECT_EQ(t.bytes_held(), 0u);
}

TEST(CollectiveTable, AnEarlierCallStillWaitingWhenALaterOneCompletesIsDropped) {
  // Worker 1 sent call 1's part to this PS's predecessor (lost): only
  // worker 0's reached this one. Call 2 completes here: call 1 never will.
  CollectiveTable t(1 << 20);
  const std::vector<float> v = {1, 2};
  ASSERT_FALSE(t.Add(Part(0, 2, v, wire::ElementType::F32))->has_value());
  auto a = Part(0, 2, v, wire::ElementType::F32);
  auto b = Part(1, 2, v, wire::ElementType::F32);
  a.seq = b.seq = 2;
  ASSERT_FALSE(t.Add(a)->has_value());
  EXPECT_EQ(t.parts_waiting(), 2u);
  auto done = t.Add(b);
  ASSERT_TRUE(done.ok() && done->has_value());
  EXPECT_EQ(t.parts_waiting(), 0u);
  EXPECT_EQ(t.bytes_held(), 0u);
}

}  // namespace
}  // namespace een
