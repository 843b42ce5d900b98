// StepKernel: one chunk's BSP update, fused and cache-blocked.
//
// For elements [begin, end) of a chunk: sums the workers' gradients in the
// order given (rank order; bf16/fp16 gradients widened to fp32 first),
// each first multiplied by its weight when `weights` are given (a worker's
// share of the batch, --dynamic-slicing), divides by `divisor` (DDP's mean), writes the
// mean to `mean_out` when asked (sum mode, replication), and applies
// `optimizer` to the values and state, one block of a few KiB at a time, so
// each gradient, value and state byte crosses the memory bus once; with
// `wire_out` the new values are also converted for a bf16/fp16 wire. Each
// element sees exactly the operations of the unfused passes (copy, add in
// order, divide, update), so results are bitwise equal to them. Distinct
// ranges may run concurrently (ApplyPool).
// With `nonfinite` set, each block of the mean is looked at (in L1, a few
// percent of the block's time) before the optimizer takes it: a NaN or an
// infinity sets the flag and ends the range there, leaving that block and
// the rest of the range untouched (blocks before it, and other ranges, may
// be updated: the caller must not publish the step).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/wire_dtype.h"
#include "ps/optimizer.h"

namespace een::ps {

struct StepInputs {
  std::vector<const void*> grads;        // each the whole chunk, in rank order; at least one
  std::vector<WireType> types;           // each gradient's dtype (bf16/fp16 are widened)
  std::vector<float> weights;            // per gradient, or empty: each weighs 1
  float divisor = 1;                     // number of contributions
  float* mean_out = nullptr;             // whole chunk, or null
  const Optimizer* optimizer = nullptr;  // null: sum mode (mean only)
  float* values = nullptr;
  std::vector<float*> state;  // the optimizer's state arrays (whole chunk)
  uint64_t step = 0;          // the optimizer step number (from 1)
  double lr = 0;              // this step's learning rate
  void* wire_out = nullptr;   // whole chunk: the new values converted to `wire_type`, or null
  WireType wire_type = WireType::kF32;
  std::atomic<bool>* nonfinite = nullptr;  // set when the mean holds a NaN or an infinity
};

void StepRange(const StepInputs& in, size_t begin, size_t end);

}  // namespace een::ps
