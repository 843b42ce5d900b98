#include "ps/step_kernel.h"

#include <algorithm>
#include <cstring>

namespace een::ps {

namespace {
constexpr size_t kBlock = 2048;  // 8 KiB of fp32: the mean block stays in L1
constexpr size_t kMaxState = 4;
}  // namespace

void StepRange(const StepInputs& in, size_t begin, size_t end) {
  float block[kBlock];
  float* state[kMaxState];
  const size_t slots = std::min(in.state.size(), kMaxState);
  const bool reuse_gradient = in.grads.size() == 1 && in.mean_out == nullptr && in.divisor == 1;
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t m = std::min(kBlock, end - b);
    const float* mean;
    if (reuse_gradient) {
      mean = in.grads[0] + b;  // one worker: its gradient is the mean, no copy
    } else {
      float* out = in.mean_out ? in.mean_out + b : block;
      std::memcpy(out, in.grads[0] + b, m * sizeof(float));
      for (size_t k = 1; k < in.grads.size(); ++k) {
        const float* __restrict g = in.grads[k] + b;
        for (size_t i = 0; i < m; ++i) out[i] += g[i];
      }
      if (in.divisor != 1) {
        const float d = in.divisor;
        for (size_t i = 0; i < m; ++i) out[i] /= d;
      }
      mean = out;
    }
    if (in.optimizer) {
      for (size_t s = 0; s < slots; ++s) state[s] = in.state[s] + b;
      in.optimizer->Apply(in.values + b, mean, state, m, in.step);
    }
  }
}

}  // namespace een::ps
