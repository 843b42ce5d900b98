// The PS's fused apply (ChunkStore::ApplySteps over StepRange, on apply
// threads) computes exactly what the plain passes compute: copy the first
// gradient, add the others in rank order, divide by their count, then the
// optimizer, element by element. Checked bit for bit, on one thread and on
// four, with fp32 and bf16 gradients.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ps/apply_pool.h"
#include "ps/chunk_store.h"

namespace een::ps {
namespace {

using transport::Frame;

constexpr int kWorkers = 3;
const std::vector<TensorInfo> kModel = {{"w", 300000}, {"b", 77}};  // w: several 64 K pieces

Frame Bytes(const void* p, size_t n) {
  auto v = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(p),
                                                    static_cast<const std::byte*>(p) + n);
  return Frame::Borrow(v->data(), v->size(), v);
}

// Values of every chunk after `steps` steps through the store.
std::vector<std::vector<float>> RunStore(const ShardMap& map, const OptimizerConfig& opt,
                                         int threads, WireType type, int steps) {
  auto store = ChunkStore::Create(map, 0, kWorkers, opt);
  EXPECT_TRUE(store.ok());
  ApplyPool pool(threads);
  (*store)->SetApplyPool(&pool);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  std::vector<uint32_t> all;
  for (uint32_t c = 0; c < map.chunks().size(); ++c) {
    std::vector<float> init(map.chunks()[c].numel);
    for (float& x : init) x = normal(rng);
    EXPECT_TRUE((*store)->SetInitial(c, Bytes(init.data(), init.size() * 4)).ok());
    all.push_back(c);
  }
  for (int step = 0; step < steps; ++step) {
    for (uint32_t c : all) {
      for (int w = kWorkers - 1; w >= 0; --w) {  // arrival order must not matter
        std::vector<float> g(map.chunks()[c].numel);
        for (float& x : g) x = normal(rng) * (w + 1);
        std::vector<uint16_t> wire(g.size());
        if (type != WireType::kF32) EncodeWire(type, g.data(), wire.data(), g.size());
        Frame f = type == WireType::kF32 ? Bytes(g.data(), g.size() * 4)
                                         : Bytes(wire.data(), wire.size() * 2);
        EXPECT_TRUE((*store)->Contribute(c, w, step, f, type).ok());
      }
    }
    (*store)->ApplySteps(all);
  }
  std::vector<std::vector<float>> out;
  for (uint32_t c : all) {
    Frame v = (*store)->Values(c);
    const float* p = reinterpret_cast<const float*>(v.data());
    out.emplace_back(p, p + map.chunks()[c].numel);
  }
  return out;
}

// The same with plain passes and the optimizer called once per chunk.
std::vector<std::vector<float>> RunPlain(const ShardMap& map, const OptimizerConfig& opt,
                                         WireType type, int steps) {
  auto optimizer = std::move(Optimizer::Create(opt)).value();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  std::vector<std::vector<float>> values, state;
  for (uint32_t c = 0; c < map.chunks().size(); ++c) {
    values.emplace_back(map.chunks()[c].numel);
    for (float& x : values.back()) x = normal(rng);
  }
  const int slots = optimizer->state_slots();
  std::vector<std::vector<std::vector<float>>> states(map.chunks().size());
  for (uint32_t c = 0; c < map.chunks().size(); ++c) {
    for (int k = 0; k < slots; ++k) states[c].emplace_back(map.chunks()[c].numel, 0.0f);
  }
  for (int step = 0; step < steps; ++step) {
    for (uint32_t c = 0; c < map.chunks().size(); ++c) {
      const size_t n = map.chunks()[c].numel;
      std::vector<std::vector<float>> grads(kWorkers);
      for (int w = kWorkers - 1; w >= 0; --w) {
        grads[w].resize(n);
        for (float& x : grads[w]) x = normal(rng) * (w + 1);
        if (type != WireType::kF32) {  // what the PS sees: rounded, widened back
          std::vector<uint16_t> wire(n);
          EncodeWire(type, grads[w].data(), wire.data(), n);
          DecodeWire(type, wire.data(), grads[w].data(), n);
        }
      }
      std::vector<float> mean = grads[0];
      for (int w = 1; w < kWorkers; ++w) {
        for (size_t i = 0; i < n; ++i) mean[i] += grads[w][i];
      }
      for (float& x : mean) x /= float(kWorkers);
      std::vector<float*> st;
      for (auto& s : states[c]) st.push_back(s.data());
      optimizer->Apply(values[c].data(), mean.data(), st.data(), n, step + 1,
                       optimizer->configured_lr());
    }
  }
  return values;
}

class FusedApply : public ::testing::TestWithParam<std::tuple<std::string, int, WireType>> {};

TEST_P(FusedApply, BitwiseEqualToPlainPasses) {
  const auto& [name, threads, type] = GetParam();
  const OptimizerConfig opt =
      name == "adam" ? OptimizerConfig::Adam(1e-3) : OptimizerConfig::SGD(0.05, 0.9, 1e-4, true);
  auto map = ShardMap::Build(kModel, 1, ShardingOptions{}, {"mem://ps"});
  ASSERT_TRUE(map.ok());
  const auto fused = RunStore(*map, opt, threads, type, 3);
  const auto plain = RunPlain(*map, opt, type, 3);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t c = 0; c < fused.size(); ++c) {
    ASSERT_EQ(0, std::memcmp(fused[c].data(), plain[c].data(), fused[c].size() * 4))
        << "chunk " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(OptimizersThreadsDtypes, FusedApply,
                         ::testing::Combine(::testing::Values("adam", "sgd"),
                                            ::testing::Values(1, 4),
                                            ::testing::Values(WireType::kF32, WireType::kBF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "threads_" +
                                  WireTypeName(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace een::ps
