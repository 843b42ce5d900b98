#include "worker/local_optimizer.h"

#include <cmath>

namespace een {

LocalOptimizer::LocalOptimizer(std::vector<torch::Tensor> parameters, const OptimizerConfig& config)
    : parameters_(std::move(parameters)), config_(config) {
  const OptimizerConfig& c = config;
  switch (c.kind) {
    case OptimizerConfig::Kind::kSgd:
      optimizer_ =
          std::make_unique<torch::optim::SGD>(parameters_, torch::optim::SGDOptions(c.lr)
                                                               .momentum(c.momentum)
                                                               .dampening(c.dampening)
                                                               .weight_decay(c.weight_decay)
                                                               .nesterov(c.nesterov));
      break;
    case OptimizerConfig::Kind::kAdam:
      optimizer_ =
          std::make_unique<torch::optim::Adam>(parameters_, torch::optim::AdamOptions(c.lr)
                                                                .betas({c.beta1, c.beta2})
                                                                .eps(c.eps)
                                                                .weight_decay(c.weight_decay));
      break;
    case OptimizerConfig::Kind::kAdamW:
      optimizer_ =
          std::make_unique<torch::optim::AdamW>(parameters_, torch::optim::AdamWOptions(c.lr)
                                                                 .betas({c.beta1, c.beta2})
                                                                 .eps(c.eps)
                                                                 .weight_decay(c.weight_decay));
      break;
    case OptimizerConfig::Kind::kAdagrad:
      optimizer_ = std::make_unique<torch::optim::Adagrad>(
          parameters_, torch::optim::AdagradOptions(c.lr)
                           .lr_decay(c.lr_decay)
                           .weight_decay(c.weight_decay)
                           .initial_accumulator_value(c.initial_accumulator)
                           .eps(c.eps));
      break;
    case OptimizerConfig::Kind::kSum:
      break;
  }
}

double LocalOptimizer::Step() {
  double norm = NAN;
  if (config_.clip_grad_norm > 0) {
    norm = torch::nn::utils::clip_grad_norm_(parameters_, config_.clip_grad_norm);
  }
  if (optimizer_) optimizer_->step();
  return norm;
}

void LocalOptimizer::SetLearningRate(double lr) {
  if (!optimizer_) return;
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
}

}  // namespace een
