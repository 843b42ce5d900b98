#include "ps/optimizer.h"

#include <cmath>

#include "common/optimizer_wire.h"

namespace een::ps {
namespace {

// torch.optim.SGD: d_p = g + wd*p; buf = first ? d_p : mom*buf + (1-damp)*d_p;
// d_p = nesterov ? d_p + mom*buf : buf; p -= lr*d_p.
class Sgd : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c)
      : lr_(c.lr), momentum_(c.momentum), dampening_(c.dampening), wd_(c.weight_decay),
        nesterov_(c.nesterov) {}
  int state_slots() const override { return momentum_ != 0 ? 1 : 0; }
  void Apply(float* p, const float* g, float* const* state, size_t n,
             uint64_t step) const override {
    // One loop per case, each free of branches, so the compiler vectorises it.
    const bool decay = wd_ != 0, first = step == 1;
    if (momentum_ == 0) {
      decay ? Plain<true>(p, g, n) : Plain<false>(p, g, n);
    } else if (decay) {
      first ? (nesterov_ ? Momentum<true, true, true>(p, g, state[0], n)
                         : Momentum<true, true, false>(p, g, state[0], n))
            : (nesterov_ ? Momentum<true, false, true>(p, g, state[0], n)
                         : Momentum<true, false, false>(p, g, state[0], n));
    } else {
      first ? (nesterov_ ? Momentum<false, true, true>(p, g, state[0], n)
                         : Momentum<false, true, false>(p, g, state[0], n))
            : (nesterov_ ? Momentum<false, false, true>(p, g, state[0], n)
                         : Momentum<false, false, false>(p, g, state[0], n));
    }
  }

 private:
  template <bool kDecay>
  void Plain(float* __restrict p, const float* __restrict g, size_t n) const {
    const float neg_lr = -lr_, wd = wd_;
    for (size_t i = 0; i < n; ++i) {
      float d = g[i];
      if (kDecay) d = d + wd * p[i];
      p[i] = p[i] + neg_lr * d;
    }
  }
  template <bool kDecay, bool kFirst, bool kNesterov>
  void Momentum(float* __restrict p, const float* __restrict g, float* __restrict buf,
                size_t n) const {
    const float neg_lr = -lr_, wd = wd_, mom = momentum_, keep = 1 - dampening_;
    for (size_t i = 0; i < n; ++i) {
      float d = g[i];
      if (kDecay) d = d + wd * p[i];
      buf[i] = kFirst ? d : buf[i] * mom + keep * d;
      d = kNesterov ? d + mom * buf[i] : buf[i];
      p[i] = p[i] + neg_lr * d;
    }
  }

 private:
  float lr_, momentum_, dampening_, wd_;
  bool nesterov_;
};

// torch.optim.Adam / AdamW (amsgrad off).
class Adam : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, bool decoupled)
      : lr_(c.lr), beta1_(c.beta1), beta2_(c.beta2), eps_(c.eps), wd_(c.weight_decay),
        decoupled_(decoupled) {}
  int state_slots() const override { return 2; }
  void Apply(float* p, const float* g, float* const* state, size_t n,
             uint64_t step) const override {
    float* exp_avg = state[0];
    float* exp_avg_sq = state[1];
    const double bc1 = 1 - std::pow(beta1_, static_cast<double>(step));
    const double bc2 = 1 - std::pow(beta2_, static_cast<double>(step));
    const float b1 = beta1_, b2 = beta2_, one_b1 = 1 - beta1_, one_b2 = 1 - beta2_;
    const float eps = eps_, wd = wd_;
    const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
    const float neg_step = static_cast<float>(-(lr_ / bc1));
    const float decay = static_cast<float>(1 - lr_ * wd_);
    for (size_t i = 0; i < n; ++i) {
      float d = g[i];
      if (wd != 0) {
        if (decoupled_) {
          p[i] = p[i] * decay;
        } else {
          d = d + wd * p[i];
        }
      }
      exp_avg[i] = exp_avg[i] * b1 + one_b1 * d;
      exp_avg_sq[i] = exp_avg_sq[i] * b2 + one_b2 * (d * d);
      const float denom = std::sqrt(exp_avg_sq[i]) / sqrt_bc2 + eps;
      p[i] = p[i] + neg_step * (exp_avg[i] / denom);
    }
  }

 private:
  double lr_, beta1_, beta2_, eps_, wd_;
  bool decoupled_;
};

// torch.optim.Adagrad.
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(const OptimizerConfig& c)
      : lr_(c.lr), lr_decay_(c.lr_decay), wd_(c.weight_decay), eps_(c.eps),
        initial_(c.initial_accumulator) {}
  int state_slots() const override { return 1; }
  void InitState(float* const* state, size_t n) const override {
    for (size_t i = 0; i < n; ++i) state[0][i] = static_cast<float>(initial_);
  }
  void Apply(float* p, const float* g, float* const* state, size_t n,
             uint64_t step) const override {
    float* sum = state[0];
    const float neg_clr = static_cast<float>(-(lr_ / (1 + (step - 1) * lr_decay_)));
    const float wd = wd_, eps = eps_;
    for (size_t i = 0; i < n; ++i) {
      float d = g[i];
      if (wd != 0) d = d + wd * p[i];
      sum[i] = sum[i] + d * d;
      const float std_dev = std::sqrt(sum[i]) + eps;
      p[i] = p[i] + neg_clr * (d / std_dev);
    }
  }

 private:
  double lr_, lr_decay_, wd_, eps_, initial_;
};

}  // namespace

Result<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config) {
  EEN_RETURN_IF_ERROR(ValidateOptimizer(config));
  switch (config.kind) {
    case OptimizerConfig::Kind::kSgd: return std::unique_ptr<Optimizer>(new Sgd(config));
    case OptimizerConfig::Kind::kAdam: return std::unique_ptr<Optimizer>(new Adam(config, false));
    case OptimizerConfig::Kind::kAdamW: return std::unique_ptr<Optimizer>(new Adam(config, true));
    case OptimizerConfig::Kind::kAdagrad: return std::unique_ptr<Optimizer>(new Adagrad(config));
    case OptimizerConfig::Kind::kSum: return std::unique_ptr<Optimizer>();
  }
  return InvalidArgument("unknown optimizer kind");
}

}  // namespace een::ps
