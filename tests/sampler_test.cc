// DistributedSampler: disjoint shares that together form the global batch.
#include "een/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <set>

#include "een/error.h"

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
  for (size_t r = 0; r < world; ++r)
    shares.push_back(DistributedSampler(n, r, world, true, 7).indices());
  for (size_t step = 0; step < n / (world * b); ++step) {
    std::multiset<size_t> together, global;
    for (size_t r = 0; r < world; ++r) {
      together.insert(shares[r].begin() + step * b, shares[r].begin() + (step + 1) * b);
    }
    global.insert(order.begin() + step * b * world, order.begin() + (step + 1) * b * world);
    EXPECT_EQ(together, global) << "step " << step;
  }
}

// --dynamic-slicing: uneven slices that tile the global batch are the
// same samples as the equal strided batches, and wrap at the epoch's end.
TEST(DistributedSampler, SlicesOfAnyShareTogetherAreTheGlobalBatch) {
  const size_t n = 100;
  DistributedSampler sampler(n, 0, 4, true, 3);
  for (uint64_t position : {0u, 40u, 90u}) {
    std::multiset<size_t> sliced, batched;
    const std::vector<uint64_t> shares = {9, 2, 3, 2};  // 16 = 4 workers x 4
    uint64_t offset = 0;
    for (uint64_t count : shares) {
      const auto slice = sampler.Slice(position, offset, count);
      EXPECT_EQ(slice.size(), count);
      sliced.insert(slice.begin(), slice.end());
      offset += count;
    }
    for (int r = 0; r < 4; ++r) {
      const auto batch = sampler.Batch(position, r, 4, 4);
      batched.insert(batch.begin(), batch.end());
    }
    EXPECT_EQ(sliced, batched) << "position " << position;
  }
  // Far past the end: positions wrap, no overflow.
  EXPECT_EQ(sampler.Slice(UINT64_MAX - 3, UINT64_MAX - 5, 3).size(), 3u);
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

TEST(PositionAfter, FollowsTheLiveCountThroughEpochs) {
  // 100 samples, batch 5, 4 workers: 20 per step, 5 steps an epoch.
  EXPECT_EQ(PositionAfter(0, 4, {}, 100, 5).position, 0u);
  auto at = PositionAfter(7, 4, {}, 100, 5);
  EXPECT_EQ(at.epoch, 1u);
  EXPECT_EQ(at.position, 40u);
  // Worker lost at step 2 (3 live: 15 a step), back at step 4 (4 live).
  const std::vector<MembershipChange> changes = {{2, {0, 1, 2}, 1}, {4, {0, 1, 2, 3}, 2}};
  at = PositionAfter(4, 4, changes, 100, 5);
  EXPECT_EQ(at.epoch, 0u);
  EXPECT_EQ(at.position, 2 * 20u + 2 * 15u);
  at = PositionAfter(6, 4, changes, 100, 5);  // 70 + 20 = 90, + 20 -> past the end: epoch 1
  EXPECT_EQ(at.epoch, 1u);
  EXPECT_EQ(at.position, 0u);
  // Each step's position equals the running sum a worker keeps itself.
  uint64_t epoch = 0, position = 0;
  for (uint64_t step = 0; step < 40; ++step) {
    auto p = PositionAfter(step, 4, changes, 100, 5);
    EXPECT_EQ(p.epoch, epoch);
    EXPECT_EQ(p.position, position);
    position += (step >= 2 && step < 4 ? 3 : 4) * 5;
    if (position >= 100) {
      ++epoch;
      position = 0;
    }
  }
  EXPECT_THROW(PositionAfter(3, 4, {{1, {}, 1}}, 100, 5), Error);
}

// Any history, as a coordinator may read it back from disk (unsorted,
// repeated steps), gives the position a step-by-step count gives, and a
// step count of a long job takes no time (a closed form per change).
TEST(PositionAfter, EqualsAStepByStepCountForAnyHistoryAndIsFastForHugeSteps) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const uint64_t size = 1 + rng() % 200, batch = 1 + rng() % 40, steps = rng() % 120;
    const int world = 1 + static_cast<int>(rng() % 6);
    std::vector<MembershipChange> changes(rng() % 5);
    for (auto& c : changes) {
      c.step = rng() % 130;
      c.live.resize(1 + rng() % 6);
      std::iota(c.live.begin(), c.live.end(), 0);
    }
    uint64_t epoch = 0, position = 0;
    int live = world;
    size_t next = 0;
    for (uint64_t s = 0; s < steps; ++s) {
      while (next < changes.size() && changes[next].step <= s) live = changes[next++].live_count();
      position += uint64_t(live) * batch;
      if (position >= size) {
        ++epoch;
        position = 0;
      }
    }
    const DataPosition at = PositionAfter(steps, world, changes, size, batch);
    ASSERT_EQ(at.epoch, epoch) << "trial " << trial;
    ASSERT_EQ(at.position, position) << "trial " << trial;
  }
  const auto start = std::chrono::steady_clock::now();
  const DataPosition far = PositionAfter(uint64_t{1} << 62, 4, {{10, {0, 1, 2}, 1}}, 60000, 64);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_LT(far.position, 60000u);
  // A batch so large that live * batch overflows 64 bits: every step is an epoch.
  const DataPosition huge = PositionAfter(5, 8, {}, 100, uint64_t{1} << 62);
  EXPECT_EQ(huge.epoch, 5u);
  EXPECT_EQ(huge.position, 0u);
}

// A lost worker's unfinished steps are drawn first by the live workers at
// the change: 4 workers, batch 5, 100 samples (20 a step); worker 3 lost
// with steps 2 and 3 unfinished, the change at step 4.
TEST(StepDataAt, TheLiveWorkersFirstTrainALostWorkersUnfinishedSteps) {
  const std::vector<MembershipChange> changes = {{4, {0, 1, 2}, 1, {}, {{3, 2}}}};
  const StepData at4 = StepDataAt(4, 4, changes, 100, 5);
  EXPECT_EQ(at4.epoch, 0u);
  EXPECT_EQ(at4.position, 80u);
  EXPECT_EQ(at4.owed, (std::vector<uint64_t>{43, 47, 51, 55, 59, 63, 67, 71, 75, 79}));
  EXPECT_EQ(at4.PositionsOf(0, 5, 100), (std::vector<uint64_t>{43, 55, 67, 79, 82}));
  EXPECT_TRUE(at4.PositionsOf(3, 5, 100).empty()) << "the lost worker is not live";
  const StepData at5 = StepDataAt(5, 4, changes, 100, 5);
  EXPECT_TRUE(at5.owed.empty());
  EXPECT_EQ(at5.position, 85u) << "step 4 took 10 owed and 5 fresh positions";
  EXPECT_EQ(StepDataAt(6, 4, changes, 100, 5).epoch, 1u);
  // The explicit loop's PositionAfter keeps its own layout.
  EXPECT_EQ(PositionAfter(5, 4, changes, 100, 5).position, 95u);
  // With nothing owed, a step's positions are Batch()'s.
  DistributedSampler order(100, 0, 1, true, 3);
  const StepData at1 = StepDataAt(1, 4, changes, 100, 5);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(order.At(at1.PositionsOf(w, 5, 100)), order.Batch(20, w, 4, 5));
  }
  // --dynamic-slicing: the lost worker's contiguous share is owed.
  const std::vector<MembershipChange> sliced = {{0, {0, 1}, 0, {5, 15}}, {3, {0}, 1, {}, {{1, 2}}}};
  EXPECT_EQ(StepDataAt(3, 2, sliced, 100, 10).owed.size(), 15u);
  EXPECT_EQ(StepDataAt(3, 2, sliced, 100, 10).owed.front(), 45u) << "step 2 starts at 40";
  // Steps of an epoch that ended before the change are owed as that epoch's:
  // the next epoch's first steps train them.
  const std::vector<MembershipChange> late = {{5, {0, 1, 2}, 1, {}, {{3, 4}}}};
  const StepData at5late = StepDataAt(5, 4, late, 100, 5);
  EXPECT_EQ(at5late.epoch, 1u);
  EXPECT_EQ(at5late.owed, (std::vector<uint64_t>{83, 87, 91, 95, 99}));
  EXPECT_EQ(at5late.owed_epochs, (std::vector<uint64_t>(5, 0)));
  EXPECT_EQ(at5late.EpochsOf(0, 5), (std::vector<uint64_t>{0, 0, 1, 1, 1}));
  const std::vector<MembershipChange> across = {{6, {0, 1, 2}, 1, {}, {{3, 4}}}};
  const StepData at6 = StepDataAt(6, 4, across, 100, 5);
  EXPECT_EQ(at6.owed, (std::vector<uint64_t>{83, 87, 91, 95, 99, 3, 7, 11, 15, 19}))
      << "step 4's, of epoch 0, and step 5's, of epoch 1";
  EXPECT_EQ(at6.owed_epochs, (std::vector<uint64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
}

// The others' loaders had drawn 2 steps ahead when worker 3 was lost at
// step 2 (4 workers, batch 5, 100 samples): steps 2 and 3 keep the old
// layout, and at step 4 the live workers first train worker 3's share of
// steps 2 and 3.
TEST(StepDataAt, ALossesDataFollowAtItsDataStepWithTheStepsBetweenOwed) {
  MembershipChange change{2, {0, 1, 2}, 1, {}, {{3, 2}}};
  change.data_step = 4;
  const std::vector<MembershipChange> changes = {change};
  for (uint64_t step : {2, 3}) {
    const StepData at = StepDataAt(step, 4, changes, 100, 5);
    EXPECT_EQ(at.live, (std::vector<int>{0, 1, 2, 3})) << "step " << step;
    EXPECT_TRUE(at.owed.empty());
    EXPECT_EQ(at.position, 20 * step);
  }
  const StepData at4 = StepDataAt(4, 4, changes, 100, 5);
  EXPECT_EQ(at4.live, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(at4.position, 80u);
  EXPECT_EQ(at4.owed, (std::vector<uint64_t>{43, 47, 51, 55, 59, 63, 67, 71, 75, 79}));
  // A data step past what the job keeps exact is held to it.
  change.data_step = 2 + kMaxDataLookAhead + 50;
  EXPECT_EQ(StepDataAt(1 + kMaxDataLookAhead, 4, {change}, 1000000, 5).live.size(), 4u);
  EXPECT_EQ(StepDataAt(2 + kMaxDataLookAhead, 4, {change}, 1000000, 5).live.size(), 3u);
}

// Any history of losses (each with up to two unfinished steps, and data
// that follow up to 3 steps later), joins and epochs: every epoch trains
// every sample once, but for the last step's padding (a lost worker's steps
// of an epoch that ended before its change's data step are trained in the
// next epoch's first steps, for their own epoch).
TEST(StepDataAt, EveryEpochTrainsEverySampleOnceThroughLossesAndJoins) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const uint64_t size = 20 + rng() % 200, batch = 1 + rng() % 8;
    const int world = 2 + static_cast<int>(rng() % 5);
    std::vector<int> live(static_cast<size_t>(world));
    std::iota(live.begin(), live.end(), 0);
    std::vector<MembershipChange> changes;
    uint64_t step = 0;
    for (int c = 0; c < 4; ++c) {
      step += 4 + rng() % 12;  // past the last change's data step
      MembershipChange change{step, live, static_cast<uint64_t>(c + 1)};
      if (live.size() > 1 && rng() % 3 != 0) {  // one lost, 0-2 steps unfinished
        const int lost = live[rng() % live.size()];
        change.live.erase(std::find(change.live.begin(), change.live.end(), lost));
        change.unfinished.push_back({lost, step - rng() % 3});
        change.data_step = step + rng() % 4;  // loaders drew 0-3 steps ahead
        if (change.unfinished.back().from_step >= change.layout_step()) change.unfinished.clear();
      } else {  // one joins
        change.live.push_back(world + c);
      }
      live = change.live;
      changes.push_back(change);
    }
    const uint64_t steps = step + 20;
    // Trained: every live worker's positions (each of its own epoch), but a lost one's
    // unfinished.
    std::vector<std::vector<int>> count;
    uint64_t last_epoch = 0;
    for (uint64_t t = 0; t < steps; ++t) {
      const StepData at = StepDataAt(t, world, changes, size, batch);
      last_epoch = at.epoch;
      if (count.size() <= at.epoch) count.resize(at.epoch + 1, std::vector<int>(size, 0));
      for (int w : at.live) {
        bool unfinished = false;
        for (const MembershipChange& c : changes) {
          for (const UnfinishedSteps& u : c.unfinished) {
            unfinished |= u.worker == w && t >= u.from_step && t < c.layout_step();
          }
        }
        const std::vector<uint64_t> positions = at.PositionsOf(w, batch, size);
        const std::vector<uint64_t> epochs = at.EpochsOf(w, batch);
        ASSERT_EQ(epochs.size(), positions.size());
        for (size_t k = 0; k < positions.size(); ++k) {
          if (!unfinished) ++count[epochs[k]][positions[k]];
        }
      }
    }
    for (uint64_t e = 0; e < last_epoch; ++e) {  // the epochs that ended
      int twice = 0;
      for (uint64_t p = 0; p < size; ++p) {
        EXPECT_GT(count[e][p], 0) << "trial " << trial << " epoch " << e << " lost " << p;
        twice += std::max(count[e][p] - 1, 0);
      }
      EXPECT_LT(twice, static_cast<int>(batch) * (world + 4))
          << "trial " << trial << " epoch " << e << ": more than the last step's padding";
    }
  }
}

}  // namespace
}  // namespace een
