// DistributedSampler: disjoint shares that together form the global batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "een/error.h"
#include "een/sampler.h"

namespace een {
namespace {

TEST(DistributedSampler, WorkersSeeEverySampleOnce) {
  const size_t n = 1000;
  std::multiset<size_t> all;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(n, r, 4, true, 42);
    s.set_epoch(3);
    for (size_t i : s.indices()) all.insert(i);
  }
  ASSERT_EQ(all.size(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(all.count(i), 1u);
}

TEST(DistributedSampler, BatchesTogetherAreTheGlobalBatch) {
  const size_t n = 640, world = 4, b = 8;
  DistributedSampler whole(n, 0, 1, true, 7);
  std::vector<size_t> order = whole.permutation();
  std::vector<std::vector<size_t>> shares;
  for (size_t r = 0; r < world; ++r) shares.push_back(DistributedSampler(n, r, world, true, 7).indices());
  for (size_t step = 0; step < n / (world * b); ++step) {
    std::multiset<size_t> together, global;
    for (size_t r = 0; r < world; ++r) {
      together.insert(shares[r].begin() + step * b, shares[r].begin() + (step + 1) * b);
    }
    global.insert(order.begin() + step * b * world, order.begin() + (step + 1) * b * world);
    EXPECT_EQ(together, global) << "step " << step;
  }
}

TEST(DistributedSampler, EpochsShuffleDifferentlyAndPadEvenly) {
  DistributedSampler s(10, 1, 4, true, 1);
  auto e0 = s.indices();
  s.set_epoch(1);
  auto e1 = s.indices();
  EXPECT_EQ(e0.size(), 3u);  // 10 samples over 4 workers: padded to 12
  EXPECT_EQ(e1.size(), 3u);
  DistributedSampler a(1000, 0, 2, true, 1), b(1000, 0, 2, true, 1);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices());
  DistributedSampler drop(10, 1, 4, true, 1, /*drop_last=*/true);
  EXPECT_EQ(drop.indices().size(), 2u);
}

TEST(DistributedSampler, BadRankIsAnError) {
  EXPECT_THROW(DistributedSampler(10, 4, 4), Error);
  EXPECT_THROW(DistributedSampler(0, 0, 1), Error);
}

}  // namespace
}  // namespace een
