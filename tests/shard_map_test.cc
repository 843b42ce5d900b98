// Sharding: balance by bytes on real models, and safe decoding of maps.
#include "common/shard_map.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace een {
namespace {

std::vector<TensorInfo> LoadModel(const std::string& name) {
  std::ifstream in(std::string(EEN_MODELS_DIR) + "/" + name + ".tsv");
  std::vector<TensorInfo> tensors;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    TensorInfo t;
    std::string shape;
    fields >> t.name >> shape >> t.numel;
    tensors.push_back(t);
  }
  return tensors;
}

std::vector<std::string> Addresses(uint32_t n) {
  std::vector<std::string> a;
  for (uint32_t i = 0; i < n; ++i) a.push_back("tcp://127.0.0.1:" + std::to_string(7000 + i));
  return a;
}

class ShardBalance : public ::testing::TestWithParam<std::tuple<std::string, uint32_t>> {};

TEST_P(ShardBalance, BytesPerPsWithinTenPercent) {
  const auto& [model, num_ps] = GetParam();
  auto tensors = LoadModel(model);
  ASSERT_GT(tensors.size(), 30u) << "model file for " << model << " not found or short";
  auto map = ShardMap::Build(tensors, num_ps, ShardingOptions{}, Addresses(num_ps));
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  auto bytes = map->BytesPerPs();
  const uint64_t lo = *std::min_element(bytes.begin(), bytes.end());
  const uint64_t hi = *std::max_element(bytes.begin(), bytes.end());
  EXPECT_LE(hi, lo * 1.10) << model << " over " << num_ps << " PS: " << lo << " .. " << hi;
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  EXPECT_EQ(total, map->TotalNumel() * 4);
}

INSTANTIATE_TEST_SUITE_P(RealModels, ShardBalance,
                         ::testing::Combine(::testing::Values("resnet50", "vgg16", "bert_base"),
                                            ::testing::Values(2u, 3u, 4u, 8u)));

TEST(ShardMap, ChunksTileEveryTensorInOrder) {
  auto map = ShardMap::Build(LoadModel("vgg16"), 4, ShardingOptions{}, Addresses(4));
  ASSERT_TRUE(map.ok());
  for (uint32_t t = 0; t < map->tensors().size(); ++t) {
    uint64_t next = 0;
    for (uint32_t c = map->FirstChunkOf(t); c < map->FirstChunkOf(t) + map->ChunkCountOf(t); ++c) {
      EXPECT_EQ(map->chunks()[c].tensor, t);
      EXPECT_EQ(map->chunks()[c].offset, next);
      EXPECT_LE(map->chunks()[c].numel, ShardingOptions{}.max_chunk_numel);
      next += map->chunks()[c].numel;
    }
    EXPECT_EQ(next, map->tensors()[t].numel);
  }
}

TEST(ShardMap, SmallModelStillSpreadsOverEveryPs) {
  std::vector<TensorInfo> small = {{"w1", 20000}, {"b1", 100}, {"w2", 30000}, {"b2", 10}};
  auto map = ShardMap::Build(small, 2, ShardingOptions{}, Addresses(2));
  ASSERT_TRUE(map.ok());
  auto bytes = map->BytesPerPs();
  EXPECT_LE(std::max(bytes[0], bytes[1]), std::min(bytes[0], bytes[1]) * 1.25);
}

TEST(ShardMap, SameInputsGiveTheSameMap) {
  auto a = ShardMap::Build(LoadModel("resnet50"), 3, ShardingOptions{}, Addresses(3));
  auto b = ShardMap::Build(LoadModel("resnet50"), 3, ShardingOptions{}, Addresses(3));
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint32_t c = 0; c < a->chunks().size(); ++c)
    EXPECT_EQ(a->OwnerOfChunk(c), b->OwnerOfChunk(c));
}

TEST(ShardMap, WireRoundTrip) {
  auto map = ShardMap::Build(LoadModel("bert_base"), 4, ShardingOptions{}, Addresses(4), 7);
  ASSERT_TRUE(map.ok());
  capnp::MallocMessageBuilder b;
  map->ToWire(b.initRoot<wire::ShardMap>());
  auto back = ShardMap::FromWire(b.getRoot<wire::ShardMap>().asReader());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->epoch(), 7u);
  EXPECT_EQ(back->chunks().size(), map->chunks().size());
  EXPECT_EQ(back->BytesPerPs(), map->BytesPerPs());
  EXPECT_EQ(back->ps_addresses(), map->ps_addresses());
}

// Same-host routes travel with the map; a process picks per PS: the route
// when the PS is on its host, else the PS's data address.
TEST(ShardMap, SameHostRoutesTravelAndArePickedPerHost) {
  auto map = ShardMap::Build(LoadModel("bert_base"), 3, ShardingOptions{}, Addresses(3), 2);
  ASSERT_TRUE(map.ok());
  map->SetLocalRoutes({{"h0", "shm:///r0/een-ps-0.sock"}, {"h1", ""}, {"h0", "shm:///r0/p2.sock"}});
  capnp::MallocMessageBuilder b;
  map->ToWire(b.initRoot<wire::ShardMap>());
  auto back = ShardMap::FromWire(b.getRoot<wire::ShardMap>().asReader());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->local_routes(), map->local_routes());
  EXPECT_EQ(back->AddressFor(0, "h0"), "shm:///r0/een-ps-0.sock");
  EXPECT_EQ(back->AddressFor(0, "h1"), back->ps_addresses()[0]);
  EXPECT_EQ(back->AddressFor(1, "h1"), back->ps_addresses()[1]);  // it offers none
  EXPECT_EQ(back->AddressFor(2, "h0"), "shm:///r0/p2.sock");
  EXPECT_EQ(back->AddressFor(2, ""), back->ps_addresses()[2]);
  // A PS added later has no route until the coordinator sets one.
  ShardMap grown = back->WithNewPs("tcp://new:1", 3);
  EXPECT_EQ(grown.AddressFor(3, "h0"), "tcp://new:1");
  // Routes for some PS only are refused.
  map->SetLocalRoutes({{"h0", "shm:///x"}});
  capnp::MallocMessageBuilder partial;
  map->ToWire(partial.initRoot<wire::ShardMap>());
  EXPECT_FALSE(ShardMap::FromWire(partial.getRoot<wire::ShardMap>().asReader()).ok());
}

TEST(ShardMap, FromWireRejectsInconsistentMaps) {
  auto map = ShardMap::Build({{"w", 10000}, {"b", 10}}, 2, ShardingOptions{}, Addresses(2));
  ASSERT_TRUE(map.ok());
  auto corrupt = [&](auto mutate) -> bool {
    capnp::MallocMessageBuilder b;
    auto root = b.initRoot<wire::ShardMap>();
    map->ToWire(root);
    mutate(root);
    return ShardMap::FromWire(root.asReader()).ok();
  };
  EXPECT_FALSE(corrupt([](auto r) { r.getChunks()[0].setNumel(5); }));     // gap
  EXPECT_FALSE(corrupt([](auto r) { r.getChunks()[0].setShard(9999); }));  // shard out of range
  EXPECT_FALSE(corrupt([](auto r) { r.getShardOwner().set(0, 5); }));      // owner out of range
  EXPECT_FALSE(corrupt([](auto r) { r.getTensors()[1].setNumel(11); }));   // not covered
  EXPECT_FALSE(corrupt([](auto r) { r.getChunks()[0].setTensor(7); }));    // tensor out of range
  EXPECT_TRUE(corrupt([](auto) {}));
}

ShardingOptions TwoReplicas() {
  ShardingOptions o;
  o.replicas = 2;
  return o;
}

// Bytes each PS holds as owner or backup.
std::vector<uint64_t> HeldBytes(const ShardMap& map) {
  std::vector<uint64_t> held(map.num_ps(), 0);
  for (uint32_t c = 0; c < map.chunks().size(); ++c) {
    held[map.OwnerOfChunk(c)] += map.chunks()[c].numel * 4ull;
    if (map.BackupOfChunk(c) != ShardMap::kNoPs)
      held[map.BackupOfChunk(c)] += map.chunks()[c].numel * 4ull;
  }
  return held;
}

TEST(ShardMapReplicas, EveryShardHasABackupOnAnotherPsAndHoldingsBalance) {
  auto map = ShardMap::Build(LoadModel("resnet50"), 4, TwoReplicas(), Addresses(4));
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  for (uint32_t s = 0; s < map->num_shards(); ++s) {
    ASSERT_NE(map->BackupOfShard(s), ShardMap::kNoPs);
    EXPECT_NE(map->BackupOfShard(s), map->OwnerOfShard(s));
  }
  auto held = HeldBytes(*map);
  const auto [lo, hi] = std::minmax_element(held.begin(), held.end());
  EXPECT_LT(double(*hi - *lo) / *hi, 0.10) << *lo << " vs " << *hi;
}

TEST(ShardMapReplicas, LossPromotesBackupsAndFindsNewOnes) {
  auto map = ShardMap::Build(LoadModel("vgg16"), 3, TwoReplicas(), Addresses(3));
  ASSERT_TRUE(map.ok());
  auto after = map->AfterLoss(1, {true, true, true}, 2);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->epoch(), 2u);
  for (uint32_t s = 0; s < map->num_shards(); ++s) {
    const uint32_t owner = after->OwnerOfShard(s);
    EXPECT_NE(owner, 1u);
    if (map->OwnerOfShard(s) == 1) {
      EXPECT_EQ(owner, map->BackupOfShard(s));  // promoted
    } else {
      EXPECT_EQ(owner, map->OwnerOfShard(s));  // untouched
    }
    EXPECT_NE(after->BackupOfShard(s), 1u);
    EXPECT_NE(after->BackupOfShard(s), ShardMap::kNoPs);  // two PS left: still two copies
    EXPECT_NE(after->BackupOfShard(s), owner);
  }
  // The last PS standing holds everything, with no backup anywhere.
  auto alone = after->AfterLoss(2, {true, false, true}, 3);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  for (uint32_t s = 0; s < map->num_shards(); ++s) {
    EXPECT_EQ(alone->OwnerOfShard(s), 0u);
    EXPECT_EQ(alone->BackupOfShard(s), ShardMap::kNoPs);
  }
  // Losing that one too cannot be survived by promotion.
  EXPECT_FALSE(alone->AfterLoss(0, {true, false, false}, 4).ok());
  // A replacement at index 1 takes every backup.
  ShardMap rejoined = alone->WithPs(1, "tcp://127.0.0.1:9999", {true, false, false}, 5);
  EXPECT_EQ(rejoined.ps_addresses()[1], "tcp://127.0.0.1:9999");
  for (uint32_t s = 0; s < map->num_shards(); ++s) EXPECT_EQ(rejoined.BackupOfShard(s), 1u);
}

// A host is a failure domain: 6 PS on 3 hosts (2 each). Every backup is on
// another host than its owner, so losing both PS of a host loses no shard,
// and the backups found after that loss again avoid their owner's host.
TEST(ShardMapReplicas, BackupsAreNeverOnTheirPrimarysHostAndAWholeHostCanGo) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b", "c", "c"};
  auto map = ShardMap::Build(LoadModel("resnet50"), 6, TwoReplicas(), Addresses(6), 1, hosts);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  auto expect_other_host = [&](const ShardMap& m, const std::vector<bool>& usable) {
    for (uint32_t s = 0; s < m.num_shards(); ++s) {
      const uint32_t owner = m.OwnerOfShard(s), backup = m.BackupOfShard(s);
      ASSERT_NE(backup, ShardMap::kNoPs) << "shard " << s;
      EXPECT_TRUE(usable[backup]) << "shard " << s;
      EXPECT_NE(hosts[owner], hosts[backup]) << "shard " << s << ": owner ps " << owner
                                             << " and backup ps " << backup << " share a host";
    }
  };
  expect_other_host(*map, std::vector<bool>(6, true));
  auto held = HeldBytes(*map);  // still balanced
  const auto [lo, hi] = std::minmax_element(held.begin(), held.end());
  EXPECT_LT(double(*hi - *lo) / *hi, 0.15) << *lo << " vs " << *hi;
  // Host "b" lost: ps 2, then ps 3 (the coordinator hears of them one by one).
  auto after2 = map->AfterLoss(2, {true, true, true, true, true, true}, 2);
  ASSERT_TRUE(after2.ok()) << after2.status().ToString();
  auto after3 = after2->AfterLoss(3, {true, true, false, true, true, true}, 3);
  ASSERT_TRUE(after3.ok()) << "losing a whole host lost a shard: " << after3.status().ToString();
  expect_other_host(*after3, {true, true, false, false, true, true});
}

// One host only (the local backend): backups go to any other PS, as before.
TEST(ShardMapReplicas, OnOneHostBackupsStillGoToAnotherPs) {
  auto map =
      ShardMap::Build(LoadModel("vgg16"), 3, TwoReplicas(), Addresses(3), 1, {"h", "h", "h"});
  ASSERT_TRUE(map.ok());
  for (uint32_t s = 0; s < map->num_shards(); ++s) {
    ASSERT_NE(map->BackupOfShard(s), ShardMap::kNoPs);
    EXPECT_NE(map->BackupOfShard(s), map->OwnerOfShard(s));
  }
}

TEST(ShardMapReplicas, WireRoundTripKeepsBackupsAndRejectsSelfBackup) {
  auto map = ShardMap::Build(LoadModel("bert_base"), 2, TwoReplicas(), Addresses(2));
  ASSERT_TRUE(map.ok());
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<wire::ShardMap>();
  map->ToWire(root);
  auto back = ShardMap::FromWire(root.asReader());
  ASSERT_TRUE(back.ok());
  for (uint32_t c = 0; c < map->chunks().size(); ++c) {
    EXPECT_EQ(back->BackupOfChunk(c), map->BackupOfChunk(c));
  }
  root.getShardBackup().set(0, root.getShardOwner()[0]);
  EXPECT_FALSE(ShardMap::FromWire(root.asReader()).ok());
  EXPECT_FALSE(ShardMap::Build({{"w", 10}}, 1, TwoReplicas(), Addresses(1)).ok());
}

// Adding a fourth PS to ResNet-50 on three: about a quarter of the bytes
// move (recorded), all onto the new PS, and the four end within 10 %.
TEST(ShardMapMoves, AddingAPsMovesAboutItsShareAndBalances) {
  auto map = ShardMap::Build(LoadModel("resnet50"), 3, ShardingOptions{}, Addresses(3));
  ASSERT_TRUE(map.ok());
  ShardMap grown = map->WithNewPs("tcp://127.0.0.1:7003", 2);
  const auto moves = grown.MovesOnto(3, {true, true, true, true});
  uint64_t moved = 0, total = 0;
  for (const auto& [shard, to] : moves) {
    EXPECT_EQ(to, 3u);
    moved += grown.ShardBytes(shard);
  }
  for (uint64_t b : map->BytesPerPs()) total += b;
  RecordProperty("resnet50_3to4_moved_bytes", std::to_string(moved));
  RecordProperty("resnet50_3to4_moved_fraction", std::to_string(double(moved) / total));
  EXPECT_GT(moved, total / 4 * 0.9);
  EXPECT_LT(moved, total / 4 * 1.1);
  ShardMap done = grown.Staged(moves, 3).Moved(moves, 1, -1, {true, true, true, true}, 4);
  EXPECT_FALSE(done.replicated());
  auto bytes = done.BytesPerPs();
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  EXPECT_LT(double(*hi - *lo) / *hi, 0.10) << *lo << " vs " << *hi;
}

TEST(ShardMapMoves, DrainingAPsMovesEverythingItOwnsAndKeepsTwoCopies) {
  ShardingOptions o;
  o.replicas = 2;
  auto map = ShardMap::Build(LoadModel("vgg16"), 3, o, Addresses(3));
  ASSERT_TRUE(map.ok());
  const std::vector<bool> others = {false, true, true};
  const auto moves = map->MovesOff(0, others);
  EXPECT_EQ(moves.size(), map->ChunksOwnedBy(0).empty() ? 0u : moves.size());
  ShardMap staged = map->Staged(moves, 2);
  for (const auto& [shard, to] : moves) {
    EXPECT_EQ(staged.OwnerOfShard(shard), 0u);
    EXPECT_EQ(staged.BackupOfShard(shard), to);  // receives an image first
  }
  ShardMap done = staged.Moved(moves, 2, /*leaving=*/0, others, 3);
  for (uint32_t s = 0; s < done.num_shards(); ++s) {
    EXPECT_NE(done.OwnerOfShard(s), 0u);
    EXPECT_NE(done.BackupOfShard(s), 0u);
    EXPECT_NE(done.BackupOfShard(s), ShardMap::kNoPs);
    EXPECT_NE(done.BackupOfShard(s), done.OwnerOfShard(s));
  }
  EXPECT_TRUE(done.ChunksHeldBy(0).empty());
}

TEST(ShardMap, RejectsBadRequests) {
  EXPECT_FALSE(ShardMap::Build({{"w", 10}}, 0, ShardingOptions{}, {}).ok());
  EXPECT_FALSE(ShardMap::Build({{"w", 0}}, 1, ShardingOptions{}, Addresses(1)).ok());
  EXPECT_FALSE(ShardMap::Build({{"w", 10}}, 2, ShardingOptions{}, Addresses(1)).ok());
}

}  // namespace
}  // namespace een
