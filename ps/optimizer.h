// Optimizer: the update a PS applies to one chunk after BSP aggregation.
//
// Each implementation reproduces torch::optim's float32 arithmetic for the
// same hyper-parameters (SGD with momentum/dampening/Nesterov/weight decay,
// Adam, AdamW, Adagrad); tests compare them against LibTorch. State lives in
// `state_slots()` arrays of the chunk's length that the caller owns (in the
// PS arena), zero-filled before the first step unless InitState() says
// otherwise. Implementations are immutable: Apply() on distinct chunks may
// run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "een/optimizer.h"

namespace een::ps {

class Optimizer {
 public:
  // InvalidArgument for a bad config; kSum has no optimizer (nullptr).
  static Result<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config);
  virtual ~Optimizer() = default;

  virtual int state_slots() const = 0;
  virtual void InitState(float* const* /*state*/, size_t /*n*/) const {}
  // One update of `n` parameters with the mean gradient; `step` counts this
  // chunk's updates from 1 (Adam's bias correction, SGD's first momentum);
  // `lr` is this step's learning rate (configured_lr(), or a schedule's).
  virtual void Apply(float* param, const float* grad, float* const* state, size_t n, uint64_t step,
                     double lr) const = 0;
  // The learning rate the job was configured with.
  virtual double configured_lr() const = 0;
};

}  // namespace een::ps
