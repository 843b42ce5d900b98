#include "common/wire_dtype.h"

#include <algorithm>
#include <cstring>

#include "common/vector_clones.h"

// GCC only: clang 14 has no __builtin_cpu_supports("f16c") (a clang build, such as
// the fuzzers', converts with the portable loops).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define EEN_HAVE_F16C_PATH 1
#endif

namespace een {

const char* WireTypeName(WireType t) {
  switch (t) {
    case WireType::kF32:
      return "fp32";
    case WireType::kF16:
      return "fp16";
    case WireType::kBF16:
      return "bf16";
  }
  return "?";
}

Result<WireType> ParseWireType(const std::string& s) {
  if (s == "fp32") return WireType::kF32;
  if (s == "fp16") return WireType::kF16;
  if (s == "bf16") return WireType::kBF16;
  return InvalidArgument("wire dtype '" + s + "' is not one of fp32, bf16, fp16");
}

namespace {

#ifdef EEN_HAVE_F16C_PATH
// fp16 through the CPU's own converters (F16C), 8 values at a time: IEEE
// round-to-nearest-even, as FloatToF16. Only NaN differs (F16C keeps the
// payload; torch writes 0x7E00), so a group holding a NaN is done by
// FloatToF16.
bool HaveF16c() {
  static const bool have = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return have;
}

__attribute__((target("avx,f16c"))) void EncodeF16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_testz_ps(nan, nan)) {
      const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    } else {
      for (size_t k = i; k < i + 8; ++k) dst[k] = FloatToF16(src[k]);
    }
  }
  for (; i < n; ++i) dst[i] = FloatToF16(src[i]);
}

// Widening is exact for every pattern, NaN payloads as F16ToFloat keeps them.
__attribute__((target("avx,f16c"))) void DecodeF16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = F16ToFloat(src[i]);
}
#endif

}  // namespace

EEN_VECTOR_CLONES void EncodeWire(WireType t, const float* __restrict src, void* dst, size_t n) {
  if (t == WireType::kF32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  uint16_t* __restrict out = static_cast<uint16_t*>(dst);
  if (t == WireType::kBF16) {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(src[i]);
  } else {
#ifdef EEN_HAVE_F16C_PATH
    if (HaveF16c()) return EncodeF16c(src, out, n);
#endif
    for (size_t i = 0; i < n; ++i) out[i] = FloatToF16(src[i]);
  }
}

EEN_VECTOR_CLONES void DecodeWire(WireType t, const void* src, float* __restrict dst, size_t n) {
  if (t == WireType::kF32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  const uint16_t* __restrict in = static_cast<const uint16_t*>(src);
  if (t == WireType::kBF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(in[i]);
  } else {
#ifdef EEN_HAVE_F16C_PATH
    if (HaveF16c()) return DecodeF16c(in, dst, n);
#endif
    for (size_t i = 0; i < n; ++i) dst[i] = F16ToFloat(in[i]);
  }
}

namespace {

// The first of `n` words at `bytes` with every exponent bit of `mask` set (a NaN or an
// infinity), or n. (Looked for only once the PS's apply found one: no need to be fast.)
template <typename Word>
size_t FirstExponentFull(const unsigned char* bytes, size_t n, Word mask) {
  for (size_t i = 0; i < n; ++i) {
    Word w;
    std::memcpy(&w, bytes + i * sizeof(Word), sizeof w);
    if ((w & mask) == mask) return i;
  }
  return n;
}

}  // namespace

size_t FirstNonFinite(WireType t, const void* data, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  switch (t) {
    case WireType::kF32:
      return FirstExponentFull<uint32_t>(bytes, n, 0x7f800000u);
    case WireType::kBF16:
      return FirstExponentFull<uint16_t>(bytes, n, 0x7f80u);
    default:  // fp16
      return FirstExponentFull<uint16_t>(bytes, n, 0x7c00u);
  }
}

}  // namespace een
