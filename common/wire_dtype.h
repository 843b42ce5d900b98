// Wire dtypes: fp32 values carried on the wire as bf16 or fp16.
//
// The conversions round exactly as LibTorch does (c10::BFloat16's
// round-to-nearest-even, c10::Half's IEEE fp16 from the FP16 library):
// ties to even, fp16 subnormals kept, values beyond fp16's range become
// infinity, NaN stays NaN (as torch's quiet NaN 0x7FC0 / 0x7E00).
// tests/wire_dtype_test.cc checks them bit for bit against torch.
// Encode/Decode convert `n` values; they read and write distinct buffers.
// They run vectorised (AVX2 where the CPU has it; fp16 through the CPU's
// F16C converters) with results bitwise equal to the one-value functions
// below, which the test also checks against torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/status.h"

namespace een {

enum class WireType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline size_t WireBytes(WireType t) { return t == WireType::kF32 ? 4 : 2; }
const char* WireTypeName(WireType t);                  // "fp32", "fp16", "bf16"
Result<WireType> ParseWireType(const std::string& s);  // the same names

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  return static_cast<uint16_t>((u + (((u >> 16) & 1) + 0x7FFFu)) >> 16);
}
inline float Bf16ToFloat(uint16_t h) { return BitsFloat(uint32_t{h} << 16); }

inline uint16_t FloatToF16(float f) {
  const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
  float base = (__builtin_fabsf(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = FloatBits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = BitsFloat((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = FloatBits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
inline float F16ToFloat(uint16_t h) {
  const uint32_t w = uint32_t{h} << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float normalized = BitsFloat((two_w >> 4) + exp_offset) * 0x1.0p-112f;
  const float denormalized = BitsFloat((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t cutoff = 1u << 27;
  return BitsFloat(sign | (two_w < cutoff ? FloatBits(denormalized) : FloatBits(normalized)));
}

// fp32 -> wire (kF32: a copy) and back.
void EncodeWire(WireType t, const float* src, void* dst, size_t n);
void DecodeWire(WireType t, const void* src, float* dst, size_t n);

// The index of the first NaN or infinity among `n` elements of type `t` at
// `data` (any alignment), or n when every one is finite (element by
// element: for naming a value already known to be there).
size_t FirstNonFinite(WireType t, const void* data, size_t n);

}  // namespace een
