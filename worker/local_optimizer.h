// LocalOptimizer: the server optimizer, clipping and learning rate of an
// EEN job, applied in this process instead (EEN_LOCAL=1: one worker, no PS).
//
// It steps torch::optim's optimizer of the same kind and hyper-parameters
// (the PS's optimizers match torch::optim's, tests/optimizer_test.cc) over
// the trainable parameters, after torch::nn::utils::clip_grad_norm_ when the
// config clips. Step() expects every parameter's .grad defined (DataParallel
// fills missing ones with zeros, as a job counts them); sum mode steps
// nothing (the program's own optimizer does). Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "een/optimizer.h"

namespace een {

class LocalOptimizer {
 public:
  LocalOptimizer(std::vector<torch::Tensor> parameters, const OptimizerConfig& config);

  // Clips (if configured) and applies one step; returns the total gradient
  // norm before clipping (NaN when the config does not clip).
  double Step();
  void SetLearningRate(double lr);
  // torch's optimizer that steps here (null in sum mode).
  const torch::optim::Optimizer* optimizer() const { return optimizer_.get(); }
  torch::optim::Optimizer* optimizer() { return optimizer_.get(); }

 private:
  std::vector<torch::Tensor> parameters_;
  OptimizerConfig config_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;  // null: sum mode
};

}  // namespace een
