// Replication inside a PS's store: a backup that applies the primary's mean
// gradients stays bitwise equal to the primary; repeats are no-ops, gaps are
// refused; a promoted backup aggregates on from where the primary was.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ps/chunk_store.h"

namespace een::ps {
namespace {

using transport::Frame;

Frame Floats(std::vector<float> v) {
  return Frame::Own(std::vector<std::byte>(reinterpret_cast<std::byte*>(v.data()),
                                           reinterpret_cast<std::byte*>(v.data() + v.size())));
}

class ChunkReplica : public ::testing::Test {
 protected:
  void SetUp() override {
    ShardingOptions o;
    o.replicas = 2;
    auto map = ShardMap::Build({{"w", 20000}, {"b", 300}}, 2, o, {"mem://a", "mem://b"});
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    map_ = *map;
    auto p = ChunkStore::Create(map_, 0, 2, OptimizerConfig::Adam(1e-2));
    auto b = ChunkStore::Create(map_, 1, 2, OptimizerConfig::Adam(1e-2));
    ASSERT_TRUE(p.ok() && b.ok());
    primary_ = std::move(p).value();
    backup_ = std::move(b).value();
    for (uint32_t c = 0; c < map_.chunks().size(); ++c) {
      if (map_.OwnerOfChunk(c) == 0) chunks_.push_back(c);
    }
    ASSERT_FALSE(chunks_.empty());
    for (uint32_t c : chunks_) {
      ASSERT_TRUE(primary_->Owns(c));
      ASSERT_TRUE(backup_->BacksUp(c));
      std::vector<float> init(primary_->Numel(c));
      for (size_t i = 0; i < init.size(); ++i) init[i] = 0.001f * float(i % 97) - 0.03f;
      ASSERT_TRUE(primary_->SetInitial(c, Floats(init)).ok());
      ASSERT_TRUE(backup_->LoadImage(primary_->CaptureChunk(c)).ok());  // the first image
    }
  }

  // One BSP step on the primary; the backup gets the mean, as a PS sends it.
  void Step(uint64_t step) {
    for (uint32_t c : chunks_) {
      for (int w = 0; w < 2; ++w) {
        std::vector<float> g(primary_->Numel(c));
        for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(float(i * (w + 1) + step)) * 0.1f;
        auto done = primary_->AddGradient(c, w, step, Floats(g));
        ASSERT_TRUE(done.ok()) << done.status().ToString();
        ASSERT_EQ(*done, w == 1);
      }
      auto applied = backup_->ApplyReplica(c, step, primary_->MeanGradient(c));
      ASSERT_TRUE(applied.ok()) << applied.status().ToString();
      EXPECT_TRUE(*applied);
    }
  }

  static bool SameBits(const ChunkStore& a, const ChunkStore& b, uint32_t c) {
    const ChunkImage x = a.CaptureChunk(c), y = b.CaptureChunk(c);
    return x.version == y.version && x.data.size() == y.data.size() &&
           std::memcmp(x.data.data(), y.data.data(), x.data.size() * sizeof(float)) == 0;
  }

  ShardMap map_;
  std::unique_ptr<ChunkStore> primary_, backup_;
  std::vector<uint32_t> chunks_;
};

TEST_F(ChunkReplica, BackupStaysBitwiseEqualIncludingOptimizerState) {
  for (uint64_t step = 0; step < 10; ++step) Step(step);
  for (uint32_t c : chunks_) EXPECT_TRUE(SameBits(*primary_, *backup_, c)) << "chunk " << c;
}

TEST_F(ChunkReplica, RepeatsAreNoOpsAndGapsAreRefused) {
  Step(0);
  const uint32_t c = chunks_[0];
  auto again = backup_->ApplyReplica(c, 0, primary_->MeanGradient(c));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);  // step 0 was applied already
  EXPECT_TRUE(SameBits(*primary_, *backup_, c));
  auto gap = backup_->ApplyReplica(c, 5, primary_->MeanGradient(c));
  EXPECT_EQ(gap.status().code(), StatusCode::kFailedPrecondition);
  auto wrong_size = backup_->ApplyReplica(c, 1, Floats({1.0f}));
  EXPECT_EQ(wrong_size.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backup_->AddGradient(c, 0, 1, primary_->MeanGradient(c)).status().code(),
            StatusCode::kInvalidArgument)
      << "a backup takes no gradients from workers";
}

TEST_F(ChunkReplica, PromotedBackupGoesOnExactlyWhereThePrimaryWould) {
  for (uint64_t step = 0; step < 3; ++step) Step(step);
  // PS 0 is lost: PS 1 takes its shards and has no backup left.
  auto next = map_.AfterLoss(0, {true, true}, 2);
  ASSERT_TRUE(next.ok());
  auto adoption = backup_->Adopt(*next, 1);
  ASSERT_TRUE(adoption.ok()) << adoption.status().ToString();
  EXPECT_EQ(adoption->promoted.size(), chunks_.size());
  EXPECT_TRUE(adoption->new_backups.empty());
  for (uint32_t c : chunks_) {
    ASSERT_TRUE(backup_->Owns(c));
    for (int w = 0; w < 2; ++w) {
      std::vector<float> g(primary_->Numel(c), 0.01f * (w + 1));
      ASSERT_TRUE(primary_->AddGradient(c, w, 3, Floats(g)).ok());
      ASSERT_TRUE(backup_->AddGradient(c, w, 3, Floats(g)).ok());
    }
    EXPECT_TRUE(SameBits(*primary_, *backup_, c)) << "chunk " << c;
  }
}

TEST_F(ChunkReplica, NewBackupsWaitForTheirImage) {
  // PS 1 is lost and comes back: it holds nothing initialized until images arrive.
  auto alone = map_.AfterLoss(1, {true, true}, 2);
  ASSERT_TRUE(alone.ok());
  auto again = alone->WithPs(1, "mem://b2", {true, false}, 3);
  auto fresh = ChunkStore::Create(again, 1, 2, OptimizerConfig::Adam(1e-2));
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE((*fresh)->AllInitialized());
  for (uint32_t c = 0; c < again.chunks().size(); ++c) {
    ASSERT_TRUE((*fresh)->BacksUp(c));
    ASSERT_TRUE((*fresh)->LoadImage(primary_->CaptureChunk(c)).ok());  // PS 0 holds every chunk
  }
  EXPECT_TRUE((*fresh)->AllInitialized());
}

}  // namespace
}  // namespace een::ps
