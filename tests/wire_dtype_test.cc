// bf16 / fp16 on the wire round exactly as LibTorch rounds (the user's
// check: a tensor sent as bf16 arrives as tensor.to(torch::kBFloat16)).
#include "common/wire_dtype.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <random>

namespace een {
namespace {

// Floats that exercise every rounding case: random bit patterns (all
// exponents, subnormals, NaN and infinity included), ties and near-ties at
// both widths, and the edges of fp16's range.
std::vector<float> Probes() {
  std::vector<float> v;
  std::mt19937 rng(42);
  for (int i = 0; i < 1 << 20; ++i) v.push_back(BitsFloat(rng()));
  for (uint32_t hi = 0; hi < (1u << 16); hi += 7) {
    for (uint32_t lo : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0x1000u, 0x0FFFu, 0x1001u, 0xFFFFu}) {
      v.push_back(BitsFloat((hi << 16) | lo));
    }
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            65504.0f,
                            65519.99f,
                            65520.0f,
                            1e9f,
                            6.1035156e-05f,
                            5.9604645e-08f,
                            2.9802322e-08f,
                            2.98023259e-08f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min()};
  for (float f : specials) v.push_back(f);
  return v;
}

void ExpectLikeTorch(WireType type, torch::ScalarType torch_type) {
  const std::vector<float> probes = Probes();
  const auto n = static_cast<int64_t>(probes.size());
  torch::Tensor source = torch::from_blob(const_cast<float*>(probes.data()), {n}, torch::kFloat);
  torch::Tensor theirs = source.to(torch_type).view(torch::kInt16);
  std::vector<uint16_t> ours(probes.size());
  EncodeWire(type, probes.data(), ours.data(), probes.size());
  const int16_t* want = theirs.data_ptr<int16_t>();
  int mismatches = 0;
  for (size_t i = 0; i < probes.size() && mismatches < 5; ++i) {
    if (std::isnan(probes[i])) {
      const float back = type == WireType::kBF16 ? Bf16ToFloat(ours[i]) : F16ToFloat(ours[i]);
      EXPECT_TRUE(std::isnan(back)) << "NaN at " << i;
      continue;
    }
    // The inline one-value conversion (used where no vector path applies) too.
    const uint16_t one = type == WireType::kBF16 ? FloatToBf16(probes[i]) : FloatToF16(probes[i]);
    if (ours[i] != static_cast<uint16_t>(want[i]) || one != ours[i]) {
      ++mismatches;
      ADD_FAILURE() << WireTypeName(type) << " of " << probes[i] << " (bits 0x" << std::hex
                    << FloatBits(probes[i]) << "): ours 0x" << ours[i] << ", torch 0x"
                    << static_cast<uint16_t>(want[i]) << ", one by one 0x" << one;
    }
  }
  // And back: every 16-bit pattern decodes as torch widens it.
  std::vector<uint16_t> all(1 << 16);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  torch::Tensor wide = torch::from_blob(all.data(), {int64_t(all.size())}, torch::kInt16)
                           .view(torch_type)
                           .to(torch::kFloat);
  std::vector<float> decoded(all.size());
  DecodeWire(type, all.data(), decoded.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const float t = wide.data_ptr<float>()[i];
    const float one = type == WireType::kBF16 ? Bf16ToFloat(all[i]) : F16ToFloat(all[i]);
    if (std::isnan(t)) {
      EXPECT_TRUE(std::isnan(decoded[i]) && std::isnan(one));
    } else {
      ASSERT_EQ(FloatBits(decoded[i]), FloatBits(t)) << "pattern 0x" << std::hex << i;
      ASSERT_EQ(FloatBits(one), FloatBits(t)) << "pattern 0x" << std::hex << i << ", one by one";
    }
  }
}

TEST(WireDtype, Bf16RoundsLikeTorch) { ExpectLikeTorch(WireType::kBF16, torch::kBFloat16); }
TEST(WireDtype, Fp16RoundsLikeTorch) { ExpectLikeTorch(WireType::kF16, torch::kHalf); }

TEST(WireDtype, Fp32IsACopyAndNamesParse) {
  const float in[3] = {1.5f, -2.25f, 3e-39f};
  float out[3];
  EncodeWire(WireType::kF32, in, out, 3);
  EXPECT_EQ(0, std::memcmp(in, out, sizeof in));
  EXPECT_EQ(*ParseWireType("bf16"), WireType::kBF16);
  EXPECT_EQ(*ParseWireType("fp16"), WireType::kF16);
  EXPECT_FALSE(ParseWireType("int8").ok());
}

}  // namespace
}  // namespace een
