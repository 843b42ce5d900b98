// ShardMove in process: shards staged on their receivers, handed over once
// every receiver holds them, abandoned when the map changes first.
#include "launcher/shard_move.h"

#include <gtest/gtest.h>

namespace een {
namespace {

std::vector<std::string> Addresses(uint32_t n) {
  std::vector<std::string> a;
  for (uint32_t i = 0; i < n; ++i) a.push_back("tcp://127.0.0.1:" + std::to_string(7000 + i));
  return a;
}

ShardMap TwoPs(uint32_t replicas) {
  std::vector<TensorInfo> model;
  for (int i = 0; i < 12; ++i) model.push_back({"t" + std::to_string(i), 40000u + 1000u * i});
  ShardingOptions options;
  options.replicas = replicas;
  auto map = ShardMap::Build(model, 2, options, Addresses(2));
  EXPECT_TRUE(map.ok()) << map.status().ToString();
  return *map;
}

TEST(ShardMove, ANewPsBacksItsShardsUpFirstAndOwnsThemOnceItHoldsThem) {
  const ShardMap grown = TwoPs(2).WithNewPs("tcp://127.0.0.1:7002", 1);
  const ShardMap::Moves moves = grown.MovesOnto(2, {true, true, true});
  ASSERT_FALSE(moves.empty());
  ShardMove move;
  const ShardMap staged = move.Begin(grown, moves, -1, 2, "balancing onto the new ps 2");
  EXPECT_TRUE(move.active());
  EXPECT_EQ(staged.epoch(), 2u);
  for (const auto& [shard, target] : moves) {
    EXPECT_EQ(target, 2u);
    EXPECT_EQ(staged.BackupOfShard(shard), 2u) << "shard " << shard << " is copied there first";
    EXPECT_NE(staged.OwnerOfShard(shard), 2u) << "shard " << shard << " is not served there yet";
  }
  const std::vector<bool> usable = {true, true, true};
  EXPECT_FALSE(move.Advance(staged, 2, {2, 2, 1}, 2, usable).has_value())
      << "ps 2 still receives its images";
  EXPECT_TRUE(move.active());
  auto done = move.Advance(staged, 2, {2, 2, 2}, 2, usable);
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(move.active());
  EXPECT_EQ(done->leaving, -1);
  EXPECT_EQ(done->map.epoch(), 3u);
  for (const auto& [shard, target] : moves) EXPECT_EQ(done->map.OwnerOfShard(shard), 2u);
}

TEST(ShardMove, ADrainedPsHandsEveryShardOverAndLeaves) {
  const ShardMap map = TwoPs(1);
  const ShardMap::Moves moves = map.MovesOff(1, {true, false});
  ShardMove move;
  const ShardMap staged = move.Begin(map, moves, 1, 2, "draining ps 1");
  auto done = move.Advance(staged, 2, {2, 2}, 1, {true, true});
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->leaving, 1);
  EXPECT_TRUE(done->map.ChunksOwnedBy(1).empty()) << "ps 1 still serves chunks";
  EXPECT_EQ(done->map.ChunksOwnedBy(0).size(), map.chunks().size());
}

TEST(ShardMove, AMapChangeFirstAbandonsTheMoves) {
  const ShardMap grown = TwoPs(2).WithNewPs("tcp://127.0.0.1:7002", 1);
  ShardMove move;
  const ShardMap staged =
      move.Begin(grown, grown.MovesOnto(2, {true, true, true}), -1, 2, "balancing");
  // A failover made epoch 3 before the images arrived.
  EXPECT_FALSE(move.Advance(staged, 3, {3, 3, 2}, 2, {true, true, true}).has_value());
  EXPECT_FALSE(move.active());
  EXPECT_FALSE(move.Advance(staged, 3, {3, 3, 3}, 2, {true, true, true}).has_value());
}

TEST(ShardMove, NothingToMoveIsDoneAtOnce) {
  const ShardMap map = TwoPs(2);
  ShardMove move;
  const ShardMap staged = move.Begin(map, {}, -1, 2, "nothing");
  auto done = move.Advance(staged, 2, {1, 1}, 2, {true, true});
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->map.epoch(), 3u);
  EXPECT_EQ(PsList({}), "no PS");
  EXPECT_EQ(PsList({0, 3}), "ps 0, ps 3");
}

}  // namespace
}  // namespace een
