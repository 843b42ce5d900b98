#include "ps/step_kernel.h"

#include <algorithm>
#include <cstring>

#include "common/vector_clones.h"

namespace een::ps {

namespace {
constexpr size_t kBlock = 2048;  // 8 KiB of fp32: the mean block stays in L1
constexpr size_t kMaxState = 4;

// Whether any of the m floats is a NaN or an infinity (every exponent bit set): the largest
// magnitude's bits, an integer max that vectorises.
EEN_VECTOR_CLONES bool AnyNonFinite(const float* __restrict x, size_t m) {
  uint32_t largest = 0;
  for (size_t i = 0; i < m; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    largest = std::max(largest, bits & 0x7fffffffu);
  }
  return largest >= 0x7f800000u;
}
}  // namespace

EEN_VECTOR_CLONES void StepRange(const StepInputs& in, size_t begin, size_t end) {
  float block[kBlock], widened[kBlock];
  float* state[kMaxState];
  const size_t slots = std::min(in.state.size(), kMaxState);
  const bool reuse_gradient = in.grads.size() == 1 && in.types[0] == WireType::kF32 &&
                              in.mean_out == nullptr && in.divisor == 1 && in.weights.empty();
  const bool weighted = !in.weights.empty();
  // Gradient k's elements [b, b + m) as fp32 (widened into `widened` if needed).
  auto gradient = [&](size_t k, size_t b, size_t m) -> const float* {
    if (in.types[k] == WireType::kF32) return static_cast<const float*>(in.grads[k]) + b;
    DecodeWire(in.types[k], static_cast<const uint16_t*>(in.grads[k]) + b, widened, m);
    return widened;
  };
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t m = std::min(kBlock, end - b);
    const float* mean;
    if (reuse_gradient) {
      mean = static_cast<const float*>(in.grads[0]) + b;  // one worker: its gradient is the mean
    } else {
      float* out = in.mean_out ? in.mean_out + b : block;
      if (weighted) {
        const float* __restrict g = gradient(0, b, m);
        const float w = in.weights[0];
        for (size_t i = 0; i < m; ++i) out[i] = g[i] * w;
      } else {
        std::memcpy(out, gradient(0, b, m), m * sizeof(float));
      }
      for (size_t k = 1; k < in.grads.size(); ++k) {
        const float* __restrict g = gradient(k, b, m);
        if (weighted) {
          const float w = in.weights[k];
          for (size_t i = 0; i < m; ++i) out[i] += g[i] * w;
        } else {
          for (size_t i = 0; i < m; ++i) out[i] += g[i];
        }
      }
      if (in.divisor != 1) {
        const float d = in.divisor;
        for (size_t i = 0; i < m; ++i) out[i] /= d;
      }
      mean = out;
    }
    if (in.nonfinite && AnyNonFinite(mean, m)) {
      in.nonfinite->store(true, std::memory_order_relaxed);
      return;
    }
    if (in.optimizer) {
      for (size_t s = 0; s < slots; ++s) state[s] = in.state[s] + b;
      in.optimizer->Apply(in.values + b, mean, state, m, in.step, in.lr);
      if (in.wire_out)
        EncodeWire(in.wire_type, in.values + b, static_cast<uint16_t*>(in.wire_out) + b, m);
    }
  }
}

}  // namespace een::ps
