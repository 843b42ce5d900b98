// The server optimizer's state in torch::optim's terms (DataParallel's
// checkpoints): which state slots an optimizer keeps, under torch's names,
// and copying a parameter's state into and out of a torch::optim optimizer
// (SGD, Adam, AdamW, Adagrad: the kinds OptimizerConfig names).
//
// The PS keeps a parameter chunk's state as `slots` float arrays in
// StateSlotNames' order; torch keeps per-parameter state objects keyed by
// the parameter's TensorImpl. A parameter whose state is empty has taken no
// step yet (torch then has no state for it either, except Adagrad's, which
// starts with its accumulator).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "een/data_parallel.h"
#include "een/optimizer.h"

namespace een {

// The PS's state slots of `config`'s optimizer, by torch's names, in the
// PS's order: SGD with momentum {"momentum_buffer"}, Adam and AdamW
// {"exp_avg", "exp_avg_sq"}, Adagrad {"sum"}; none for plain SGD and sum mode.
std::vector<std::string> StateSlotNames(const OptimizerConfig& config);

// Whether `optimizer` is torch's optimizer of `config`'s kind; if not, why.
std::string TorchKindMismatch(const torch::optim::Optimizer& optimizer,
                              const OptimizerConfig& config);

// `state`'s step and tensors into `optimizer`'s state for `parameter`
// (replacing what it had; an empty state removes it, as before a first
// step). The optimizer must be of `config`'s kind.
void WriteTorchState(torch::optim::Optimizer& optimizer, const torch::Tensor& parameter,
                     const ParameterState& state, const OptimizerConfig& config);
// The reverse: `optimizer`'s state for `parameter` (copies, float32 on the
// CPU), empty when it has none.
ParameterState ReadTorchState(const torch::optim::Optimizer& optimizer,
                              const torch::Tensor& parameter, const std::string& name,
                              const OptimizerConfig& config);

}  // namespace een
