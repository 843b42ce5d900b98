// Replication inside a PS's store: a backup that applies the primary's mean
// gradients stays bitwise equal to the primary; repeats are no-ops, gaps are
// refused; a promoted backup aggregates on from where the primary was; under
// async a snapshot keeps each chunk's per-worker steps.
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

// ssp/async snapshots: the store is labelled with the step every live
// worker has completed on every chunk (the slowest's), and a snapshot
// brings each chunk's per-worker steps back, so a resumed worker's
// gradients the chunk already holds are dropped as repeats. A bsp store
// refuses such a snapshot; an async one reads a bsp snapshot's version as
// every worker's step.
TEST(AsyncSnapshot, KeepsEachWorkersStepsAndIsLabelledWithTheSlowest) {
  ShardingOptions o;
  o.max_chunk_numel = 500;
  auto map = ShardMap::Build({{"w", 1000}, {"b", 10}}, 1, o, {"mem://a"});
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  Consistency async;
  async.kind = Consistency::Kind::kAsync;
  auto make = [&](bool per_arrival, int workers = 3) {
    auto s = ChunkStore::Create(*map, 0, workers, OptimizerConfig::SGD(0.25));
    EXPECT_TRUE(s.ok());
    if (per_arrival) (*s)->SetConsistency(async);
    return std::move(s).value();
  };
  auto store = make(true);
  const uint32_t chunks = static_cast<uint32_t>(map->chunks().size());
  ASSERT_GE(chunks, 3u);
  for (uint32_t c = 0; c < chunks; ++c) {
    ASSERT_TRUE(store->SetInitial(c, Floats(std::vector<float>(store->Numel(c), 0.0f))).ok());
  }
  auto grad = [&](uint32_t c, int w, uint64_t step) {
    auto applied =
        store->AddGradient(c, w, step, Floats(std::vector<float>(store->Numel(c), 1.0f)));
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  };
  EXPECT_EQ(store->CompletedStep(), 0u);
  for (uint32_t c = 0; c < chunks; ++c) {
    for (int w = 0; w < 3; ++w) grad(c, w, 0);
  }
  EXPECT_EQ(store->CompletedStep(), 1u);
  grad(0, 0, 1);  // worker 0 is further on chunk 0 only
  grad(0, 0, 2);
  grad(1, 2, 1);
  EXPECT_EQ(store->CompletedStep(), 1u) << "the slowest worker on any chunk labels it";

  const std::vector<ChunkImage> images = store->Capture();
  auto resumed = make(true);
  ASSERT_TRUE(resumed->Restore(images).ok());
  EXPECT_EQ(resumed->CompletedStep(), 1u);
  EXPECT_EQ(resumed->WorkerSteps(0, 0), 3u);
  EXPECT_EQ(resumed->WorkerSteps(1, 0), 1u);
  EXPECT_EQ(resumed->WorkerSteps(1, 2), 2u);
  EXPECT_TRUE(*resumed->IsRepeat(0, 0, 1)) << "chunk 0 holds worker 0's step 1";
  EXPECT_FALSE(*resumed->IsRepeat(1, 0, 1));
  EXPECT_EQ(resumed->CaptureChunk(0).data, store->CaptureChunk(0).data);

  // Resumed with 4 workers: the new one starts at the snapshot's step; with
  // 2, worker 2's steps stay in the values.
  auto more = make(true, 4);
  ASSERT_TRUE(more->Restore(images, /*step=*/1).ok());
  for (uint32_t c = 0; c < chunks; ++c) EXPECT_EQ(more->WorkerSteps(c, 3), 1u) << "chunk " << c;
  EXPECT_EQ(more->WorkerSteps(0, 0), 3u);
  EXPECT_EQ(more->CompletedStep(), 1u);
  auto fewer = make(true, 2);
  ASSERT_TRUE(fewer->Restore(images, 1).ok());
  EXPECT_EQ(fewer->WorkerSteps(0, 0), 3u);
  EXPECT_EQ(fewer->CaptureChunk(1).data, store->CaptureChunk(1).data);

  auto bsp = make(false);
  const Status refused = bsp->Restore(images);
  EXPECT_EQ(refused.code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.message().find("resume it under ssp:K or async too"), std::string::npos)
      << refused.ToString();

  // A bsp snapshot of step 4 (every chunk at version 4) under async.
  std::vector<ChunkImage> bsp_images = images;
  for (ChunkImage& image : bsp_images) {
    image.version = 4;
    image.worker_steps.clear();
  }
  auto from_bsp = make(true);
  ASSERT_TRUE(from_bsp->Restore(bsp_images).ok());
  for (int w = 0; w < 3; ++w) EXPECT_EQ(from_bsp->WorkerSteps(1, w), 4u);
  EXPECT_EQ(from_bsp->CompletedStep(), 4u);
}

// A snapshot taken with SGD resumed with Adam: refused, saying what the
// snapshot holds (values and no state slot) and what to resume with.
TEST(AsyncSnapshot, AnotherOptimizersSnapshotIsRefusedNamingTheFix) {
  auto map = ShardMap::Build({{"w", 1000}}, 1, ShardingOptions{}, {"mem://a"});
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  auto sgd = ChunkStore::Create(*map, 0, 2, OptimizerConfig::SGD(0.25));
  auto adam = ChunkStore::Create(*map, 0, 2, OptimizerConfig::Adam(1e-2));
  ASSERT_TRUE(sgd.ok() && adam.ok());
  ASSERT_TRUE((*sgd)->SetInitial(0, Floats(std::vector<float>(1000, 1.0f))).ok());
  const Status refused = (*adam)->Restore((*sgd)->Capture());
  EXPECT_EQ(refused.code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.message().find("holds 1000 floats where this job needs 3000"),
            std::string::npos)
      << refused.ToString();
  EXPECT_NE(refused.message().find("taken with an optimizer of 0 state slot(s)"), std::string::npos)
      << refused.ToString();
  EXPECT_NE(refused.message().find("resume with the model and optimizer the run was started with"),
            std::string::npos)
      << refused.ToString();
}

// The per-arrival rule: each gradient is one optimizer step at lr / N
// (SGD: exactly its share of a BSP step's mean), and at lr / sqrt(N) for
// Adam and AdamW (the square-root rule: their step is about lr whatever
// the gradient's scale). One gradient of 1 from one of 4 workers, from 0.
TEST(PerArrivalRule, SgdTakesLrOverNAndAdamLrOverTheSquareRootOfN) {
  auto map = ShardMap::Build({{"w", 8}}, 1, ShardingOptions{}, {"mem://a"});
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  Consistency async;
  async.kind = Consistency::Kind::kAsync;
  auto first_value = [&](const OptimizerConfig& optimizer) {
    auto store = ChunkStore::Create(*map, 0, 4, optimizer);
    EXPECT_TRUE(store.ok());
    (*store)->SetConsistency(async);
    EXPECT_TRUE((*store)->SetInitial(0, Floats(std::vector<float>(8, 0.0f))).ok());
    EXPECT_TRUE((*store)->AddGradient(0, 2, 0, Floats(std::vector<float>(8, 1.0f))).ok());
    return (*store)->CaptureChunk(0).data[0];
  };
  EXPECT_EQ(first_value(OptimizerConfig::SGD(0.5)), -0.125f) << "0.5 / 4";
  // Adam's first step is lr * g / (|g| + eps): lr / sqrt(4) = 0.005.
  EXPECT_NEAR(first_value(OptimizerConfig::Adam(1e-2)), -0.005f, 1e-6f);
  EXPECT_NEAR(first_value(OptimizerConfig::AdamW(1e-2, 0.9, 0.999, 1e-8, 0)), -0.005f, 1e-6f);
}

// Adam's beta1 under ssp/async is lowered by the momentum 4 workers' stale
// gradients add (1 - 1/4): 0.9 becomes 0.15. A gradient of 1 then one of
// -1 (a step each at lr' = lr / 2): the second step's bias-corrected first
// moment is -(1 - beta1) / (1 + beta1), its second moment 1, so the value
// ends at -lr' + lr' * 0.85 / 1.15 (with beta1 0.9 it would be -lr' + lr' * 0.1 / 1.9).
TEST(PerArrivalRule, AdamsBeta1LeavesOutTheMomentumOfTheAsynchrony) {
  EXPECT_DOUBLE_EQ(PerArrivalBeta1(0.9, 4), 0.15);
  EXPECT_DOUBLE_EQ(PerArrivalBeta1(0.9, 1), 0.9);
  EXPECT_DOUBLE_EQ(PerArrivalBeta1(0.9, 32), 0.0);
  auto map = ShardMap::Build({{"w", 8}}, 1, ShardingOptions{}, {"mem://a"});
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  Consistency async;
  async.kind = Consistency::Kind::kAsync;
  auto store = ChunkStore::Create(*map, 0, 4, OptimizerConfig::Adam(1e-2));
  ASSERT_TRUE(store.ok());
  (*store)->SetConsistency(async);
  ASSERT_TRUE((*store)->SetInitial(0, Floats(std::vector<float>(8, 0.0f))).ok());
  ASSERT_TRUE((*store)->AddGradient(0, 2, 0, Floats(std::vector<float>(8, 1.0f))).ok());
  ASSERT_TRUE((*store)->AddGradient(0, 3, 0, Floats(std::vector<float>(8, -1.0f))).ok());
  EXPECT_NEAR((*store)->CaptureChunk(0).data[0], -0.005 + 0.005 * 0.85 / 1.15, 1e-6);
}

}  // namespace
}  // namespace een::ps
