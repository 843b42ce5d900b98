// The optimizer the parameter servers apply, chosen by the training program.
//
// With a server optimizer (SGD, Adam, AdamW, Adagrad) each PS averages the
// workers' gradients for a step and applies the update once; workers pull
// fresh parameters. With Sum(), the PS only averages: workers pull the mean
// gradient into `.grad` and step their own torch optimizer. Hyper-parameters
// and their defaults match torch::optim's. A plain value type.
//
// clip_grad_norm > 0 clips the mean gradient (over every worker, every
// parameter, every PS) to that global L2 norm before each step, as
// torch::nn::utils::clip_grad_norm_(params, max_norm) on the averaged
// gradient would: OptimizerConfig::Adam(1e-3).WithClipGradNorm(1.0). Not in
// sum mode (clip .grad yourself after Step() there).
#pragma once

#include <string>

namespace een {

struct OptimizerConfig {
  enum class Kind { kSgd, kAdam, kAdamW, kAdagrad, kSum };
  Kind kind = Kind::kSgd;
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double lr_decay = 0.0;             // Adagrad
  double initial_accumulator = 0.0;  // Adagrad
  double clip_grad_norm = 0.0;       // > 0: max global L2 norm of the mean gradient

  OptimizerConfig WithClipGradNorm(double max_norm) const {
    OptimizerConfig c = *this;
    c.clip_grad_norm = max_norm;
    return c;
  }

  static OptimizerConfig SGD(double lr, double momentum = 0.0, double weight_decay = 0.0,
                             bool nesterov = false, double dampening = 0.0) {
    OptimizerConfig c;
    c.kind = Kind::kSgd;
    c.lr = lr;
    c.momentum = momentum;
    c.weight_decay = weight_decay;
    c.nesterov = nesterov;
    c.dampening = dampening;
    return c;
  }
  static OptimizerConfig Adam(double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                              double eps = 1e-8, double weight_decay = 0.0) {
    OptimizerConfig c;
    c.kind = Kind::kAdam;
    c.lr = lr;
    c.beta1 = beta1;
    c.beta2 = beta2;
    c.eps = eps;
    c.weight_decay = weight_decay;
    return c;
  }
  static OptimizerConfig AdamW(double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                               double eps = 1e-8, double weight_decay = 1e-2) {
    OptimizerConfig c = Adam(lr, beta1, beta2, eps, weight_decay);
    c.kind = Kind::kAdamW;
    return c;
  }
  static OptimizerConfig Adagrad(double lr = 1e-2, double lr_decay = 0.0, double weight_decay = 0.0,
                                 double initial_accumulator = 0.0, double eps = 1e-10) {
    OptimizerConfig c;
    c.kind = Kind::kAdagrad;
    c.lr = lr;
    c.lr_decay = lr_decay;
    c.weight_decay = weight_decay;
    c.initial_accumulator = initial_accumulator;
    c.eps = eps;
    return c;
  }
  static OptimizerConfig Sum() {
    OptimizerConfig c;
    c.kind = Kind::kSum;
    return c;
  }
};

}  // namespace een
