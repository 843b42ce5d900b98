#include "common/wire_dtype.h"

#include "common/vector_clones.h"

namespace een {

const char* WireTypeName(WireType t) {
  switch (t) {
    case WireType::kF32: return "fp32";
    case WireType::kF16: return "fp16";
    case WireType::kBF16: return "bf16";
  }
  return "?";
}

Result<WireType> ParseWireType(const std::string& s) {
  if (s == "fp32") return WireType::kF32;
  if (s == "fp16") return WireType::kF16;
  if (s == "bf16") return WireType::kBF16;
  return InvalidArgument("wire dtype '" + s + "' is not one of fp32, bf16, fp16");
}

EEN_VECTOR_CLONES void EncodeWire(WireType t, const float* __restrict src, void* dst, size_t n) {
  if (t == WireType::kF32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  uint16_t* __restrict out = static_cast<uint16_t*>(dst);
  if (t == WireType::kBF16) {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(src[i]);
  } else {
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
    for (size_t i = 0; i < n; ++i) dst[i] = F16ToFloat(in[i]);
  }
}

}  // namespace een
