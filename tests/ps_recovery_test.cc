// A lost PS in process: the failover plan (backups promoted, or why not),
// when a job cannot roll back, and the rollback protocol.
#include "launcher/ps_recovery.h"

#include <gtest/gtest.h>

namespace een {
namespace {

using std::chrono::milliseconds;

ShardMap ThreePs(uint32_t replicas) {
  std::vector<TensorInfo> model;
  for (int i = 0; i < 12; ++i) model.push_back({"t" + std::to_string(i), 40000u + 1000u * i});
  ShardingOptions options;
  options.replicas = replicas;
  std::vector<std::string> addresses;
  for (int i = 0; i < 3; ++i) addresses.push_back("tcp://127.0.0.1:" + std::to_string(7000 + i));
  auto map = ShardMap::Build(model, 3, options, addresses, 4);
  EXPECT_TRUE(map.ok()) << map.status().ToString();
  return *map;
}

TEST(PlanFailover, TheBackupsServeTheLostPsShards) {
  const ShardMap map = ThreePs(2);
  auto plan = PlanFailover(map, 1, 4, {true, true, true}, {4, 4, 4}, false);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->map.epoch(), 5u);
  EXPECT_FALSE(plan->backups_pending);
  EXPECT_TRUE(plan->map.ChunksOwnedBy(1).empty());
  uint64_t bytes = 0;
  size_t shards = 0;
  for (uint32_t s = 0; s < map.num_shards(); ++s) {
    if (map.OwnerOfShard(s) != 1 || map.ShardBytes(s) == 0) continue;
    ++shards;
    bytes += map.ShardBytes(s);
    EXPECT_EQ(plan->map.OwnerOfShard(s), map.BackupOfShard(s)) << "shard " << s;
    EXPECT_TRUE(plan->heirs.count(map.BackupOfShard(s)));
  }
  EXPECT_GT(shards, 0u);
  EXPECT_EQ(plan->shards, shards);
  EXPECT_EQ(plan->bytes, bytes);
  EXPECT_GT(plan->rebuilt, 0u) << "shards whose backup was on ps 1, or was promoted, get new ones";
  EXPECT_FALSE(plan->heirs.count(1));
}

TEST(PlanFailover, ABackupStillBeingBuiltCannotTakeOver) {
  const ShardMap map = ThreePs(2);
  uint32_t backup = ShardMap::kNoPs;
  for (uint32_t s = 0; s < map.num_shards() && backup == ShardMap::kNoPs; ++s) {
    if (map.OwnerOfShard(s) == 1) backup = map.BackupOfShard(s);
  }
  ASSERT_NE(backup, ShardMap::kNoPs);
  std::vector<uint64_t> ready = {4, 4, 4};
  ready[backup] = 3;  // still receiving epoch 4's images
  auto refused = PlanFailover(map, 1, 4, {true, true, true}, ready, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("ps " + std::to_string(backup) +
                                            " is still building its backups of shard map epoch 4"),
            std::string::npos)
      << refused.status().ToString();
  // The first map of a fresh job: worker 0 still holds the initial values.
  auto kept = PlanFailover(map, 1, 4, {true, true, true}, ready, true);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_TRUE(kept->backups_pending);
}

// A whole host lost: two PS gone one right after the other. After the
// first failover (epoch 5) the survivors take new backups they have not
// built yet (still at epoch 4), but the backups they held since epoch 4
// are built: the second loss fails over too. A backup given only in epoch
// 5 is not built, and is refused.
TEST(PlanFailover, ASecondLossRightAfterTheFirstFailsOverToBackupsBuiltBefore) {
  std::vector<TensorInfo> model;
  for (int i = 0; i < 12; ++i) model.push_back({"t" + std::to_string(i), 40000u + 1000u * i});
  ShardingOptions options;
  options.replicas = 2;
  std::vector<std::string> addresses;
  for (int i = 0; i < 4; ++i) addresses.push_back("tcp://127.0.0.1:" + std::to_string(7000 + i));
  // ps 1 and 2 on host "b": no shard of one is backed up on the other.
  auto map = ShardMap::Build(model, 4, options, addresses, 4, {"a", "b", "b", "c"});
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  auto first = PlanFailover(*map, 1, 4, {true, true, true, true}, {4, 4, 4, 4}, false);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // ps 2 is silent too, and nobody built epoch 5's new backups yet.
  auto second = PlanFailover(first->map, 2, 5, {true, false, true, true}, {4, 0, 4, 4}, false);
  ASSERT_TRUE(second.ok()) << "a whole host lost: " << second.status().ToString();
  for (uint32_t s = 0; s < map->num_shards(); ++s) {
    const uint32_t owner = second->map.OwnerOfShard(s);
    EXPECT_TRUE(owner == 0 || owner == 3) << "shard " << s;
  }
  // A shard whose backup came only with epoch 5 cannot be served by it yet.
  uint32_t fresh = ShardMap::kNoPs;
  for (uint32_t s = 0; s < map->num_shards() && fresh == ShardMap::kNoPs; ++s) {
    if (first->map.BackupSince(s) == 5) fresh = first->map.OwnerOfShard(s);
  }
  ASSERT_NE(fresh, ShardMap::kNoPs) << "the first failover gave no shard a new backup";
  EXPECT_FALSE(
      PlanFailover(first->map, fresh, 5, {true, false, true, true}, {4, 0, 4, 4}, false).ok());
}

TEST(PlanFailover, WithoutBackupsThereIsNoFailover) {
  auto plan = PlanFailover(ThreePs(1), 2, 4, {true, true, true}, {4, 4, 4}, false);
  EXPECT_FALSE(plan.ok());
  EXPECT_FALSE(PlanFailover(ThreePs(2), 7, 4, {true, true, true}, {4, 4, 4}, false).ok())
      << "a rank the job does not have";
}

TEST(WhyNoRollback, SaysWhyAJobCannotRollBack) {
  EXPECT_FALSE(WhyNoRollback(false, 100, 50, false).has_value());
  EXPECT_NE(WhyNoRollback(true, 100, 50, false)->find("sum-mode"), std::string::npos);
  EXPECT_NE(WhyNoRollback(false, 0, 50, false)->find("snapshots every 50 steps"),
            std::string::npos);
  EXPECT_NE(WhyNoRollback(false, 100, 50, true)->find("--resume"), std::string::npos);
  const std::string finished =
      WhyNoRollback(false, 100, 50, false, std::pair<int, uint64_t>{2, 180}).value_or("");
  EXPECT_NE(finished.find("worker 2 had finished training at step 180, past the last complete "
                          "snapshot (step 100)"),
            std::string::npos)
      << finished;
}

TEST(Rollback, EndsOnceEveryPsIsBackAndAnswersTheWaitingWorkers) {
  Rollback rollback;
  EXPECT_FALSE(rollback.active());
  EXPECT_EQ(rollback.epoch(), 0u);
  const auto now = Rollback::Clock::now();
  rollback.Begin(100, 6, now);
  EXPECT_TRUE(rollback.active());
  EXPECT_EQ(rollback.step(), 100u);
  EXPECT_EQ(rollback.epoch(), 6u);
  rollback.Ready(0, 5);  // an answer to an earlier rollback
  EXPECT_FALSE(rollback.Complete(1));
  rollback.Ready(0, 6);
  rollback.Ready(0, 6);
  EXPECT_FALSE(rollback.Complete(2)) << "ps 1 is not back";
  rollback.Queue("worker-0");
  rollback.Ready(1, 6);  // the replacement, from the snapshot
  EXPECT_TRUE(rollback.Complete(2));
  EXPECT_EQ(rollback.End(), (std::vector<transport::PeerId>{"worker-0"}));
  EXPECT_FALSE(rollback.active());
  EXPECT_EQ(rollback.epoch(), 6u) << "the latest rollback's epoch stays for job starts";
  EXPECT_FALSE(rollback.Complete(2));
}

TEST(Rollback, TimesOutWithoutAReplacement) {
  Rollback rollback;
  const auto now = Rollback::Clock::now();
  EXPECT_FALSE(rollback.TimedOut(now + milliseconds(10000), milliseconds(1000)));
  rollback.Begin(100, 6, now);
  EXPECT_FALSE(rollback.TimedOut(now + milliseconds(500), milliseconds(1000)));
  EXPECT_TRUE(rollback.TimedOut(now + milliseconds(1500), milliseconds(1000)));
  rollback.Begin(100, 7, now + milliseconds(1500));  // a second loss starts it again
  EXPECT_FALSE(rollback.TimedOut(now + milliseconds(2000), milliseconds(1000)));
}

}  // namespace
}  // namespace een
