// Gradient buckets: every chunk in exactly one bucket, sizes bounded, and
// packing then unpacking gives every tensor back bit for bit.
#include "worker/bucket_layout.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace een {
namespace {

ShardMap MakeMap(std::vector<TensorInfo> tensors, uint32_t ps, uint32_t max_chunk) {
  std::vector<std::string> addresses;
  for (uint32_t i = 0; i < ps; ++i) addresses.push_back("mem://ps" + std::to_string(i));
  ShardingOptions options;
  options.max_chunk_numel = max_chunk;
  return ShardMap::Build(std::move(tensors), ps, options, addresses).value();
}

TEST(BucketLayout, EveryChunkOnceAndBucketsBounded) {
  ShardMap map =
      MakeMap({{"a", 100000}, {"b", 10}, {"c", 70000}, {"d", 5000}, {"e", 300000}}, 2, 1 << 16);
  const size_t bucket_bytes = 256 * 1024;
  BucketLayout layout(map, bucket_bytes);
  std::multiset<uint32_t> seen;
  for (const auto& b : layout.buckets()) {
    size_t numel = 0;
    for (uint32_t c : b.chunks) {
      seen.insert(c);
      numel += map.chunks()[c].numel;
    }
    EXPECT_EQ(numel, b.numel);
    EXPECT_TRUE(b.numel * 4 <= bucket_bytes || b.chunks.size() == 1);
  }
  EXPECT_EQ(seen.size(), map.chunks().size());
  for (uint32_t c = 0; c < map.chunks().size(); ++c) EXPECT_EQ(seen.count(c), 1u);
}

TEST(BucketLayout, LastTensorFillsTheFirstBucket) {
  ShardMap map = MakeMap({{"first", 1000}, {"middle", 1000}, {"last", 1000}}, 1, 1 << 16);
  BucketLayout layout(map, 4000);  // one tensor per bucket
  ASSERT_EQ(layout.buckets().size(), 3u);
  EXPECT_EQ(layout.buckets()[0].tensors, std::vector<uint32_t>{2});
  EXPECT_EQ(layout.buckets()[2].tensors, std::vector<uint32_t>{0});
}

TEST(BucketLayout, PackThenUnpackRestoresEveryTensor) {
  std::vector<TensorInfo> tensors = {{"w1", 123457}, {"b1", 17}, {"w2", 65536}, {"b2", 1}};
  ShardMap map = MakeMap(tensors, 3, 10000);
  BucketLayout layout(map, 100 * 1024);
  std::vector<std::vector<float>> storage;
  std::vector<float*> out;
  std::vector<const float*> in;
  for (const auto& b : layout.buckets()) storage.emplace_back(b.numel, -1.0f);
  for (auto& s : storage) {
    out.push_back(s.data());
    in.push_back(s.data());
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<std::vector<float>> values;
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    values.emplace_back(tensors[t].numel);
    for (float& v : values.back()) v = dist(rng);
    layout.Pack(t, values.back().data(), out);
  }
  for (const auto& s : storage) {
    for (float v : s) ASSERT_NE(v, -1.0f) << "a bucket slot was never written";
  }
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    std::vector<float> back(tensors[t].numel, 0);
    layout.Unpack(t, in, back.data());
    EXPECT_EQ(back, values[t]) << "tensor " << tensors[t].name;
  }
}

}  // namespace
}  // namespace een
