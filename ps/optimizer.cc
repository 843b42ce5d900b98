#include "ps/optimizer.h"

#include <cmath>

#include "common/optimizer_wire.h"
#include "common/vector_clones.h"

namespace een::ps {
namespace {

// torch.optim.SGD: d_p = g + wd*p; buf = first ? d_p : mom*buf + (1-damp)*d_p;
// d_p = nesterov ? d_p + mom*buf : buf; p -= lr*d_p.
class Sgd : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c)
      : lr_(c.lr),
        momentum_(c.momentum),
        dampening_(c.dampening),
        wd_(c.weight_decay),
        nesterov_(c.nesterov) {}
  int state_slots() const override { return momentum_ != 0 ? 1 : 0; }
  double configured_lr() const override { return lr_; }
  void Apply(float* p, const float* g, float* const* state, size_t n, uint64_t step,
             double lr) const override {
    // One loop per case, each free of branches, so the compiler vectorises it.
    const bool decay = wd_ != 0, first = step == 1;
    if (momentum_ == 0) {
      decay ? Plain<true>(p, g, n, lr) : Plain<false>(p, g, n, lr);
    } else if (decay) {
      first ? (nesterov_ ? Momentum<true, true, true>(p, g, state[0], n, lr)
                         : Momentum<true, true, false>(p, g, state[0], n, lr))
            : (nesterov_ ? Momentum<true, false, true>(p, g, state[0], n, lr)
                         : Momentum<true, false, false>(p, g, state[0], n, lr));
    } else {
      first ? (nesterov_ ? Momentum<false, true, true>(p, g, state[0], n, lr)
                         : Momentum<false, true, false>(p, g, state[0], n, lr))
            : (nesterov_ ? Momentum<false, false, true>(p, g, state[0], n, lr)
                         : Momentum<false, false, false>(p, g, state[0], n, lr));
    }
  }

 private:
  template <bool kDecay>
  EEN_VECTOR_CLONES void Plain(float* __restrict p, const float* __restrict g, size_t n,
                               double lr) const {
    const float neg_lr = -static_cast<float>(lr), wd = wd_;
    for (size_t i = 0; i < n; ++i) {
      float d = g[i];
      if (kDecay) d = d + wd * p[i];
      p[i] = p[i] + neg_lr * d;
    }
  }
  template <bool kDecay, bool kFirst, bool kNesterov>
  EEN_VECTOR_CLONES void Momentum(float* __restrict p, const float* __restrict g,
                                  float* __restrict buf, size_t n, double lr) const {
    const float neg_lr = -static_cast<float>(lr), wd = wd_, mom = momentum_, keep = 1 - dampening_;
    for (size_t i = 0; i < n; ++i) {
      float d = g[i];
      if (kDecay) d = d + wd * p[i];
      buf[i] = kFirst ? d : buf[i] * mom + keep * d;
      d = kNesterov ? d + mom * buf[i] : buf[i];
      p[i] = p[i] + neg_lr * d;
    }
  }

 private:
  double lr_;
  float momentum_, dampening_, wd_;
  bool nesterov_;
};

// One Adam update of n elements, the loop on its own so it can be cloned
// for AVX2 (a virtual function cannot).
struct AdamStep {
  float b1, b2, one_b1, one_b2, eps, wd, sqrt_bc2, neg_step, decay;
  bool decoupled;
};
EEN_VECTOR_CLONES void AdamLoop(const AdamStep& k, float* __restrict p, const float* __restrict g,
                                float* __restrict exp_avg, float* __restrict exp_avg_sq, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float d = g[i];
    if (k.wd != 0) {
      if (k.decoupled) {
        p[i] = p[i] * k.decay;
      } else {
        d = d + k.wd * p[i];
      }
    }
    exp_avg[i] = exp_avg[i] * k.b1 + k.one_b1 * d;
    exp_avg_sq[i] = exp_avg_sq[i] * k.b2 + k.one_b2 * (d * d);
    const float denom = std::sqrt(exp_avg_sq[i]) / k.sqrt_bc2 + k.eps;
    p[i] = p[i] + k.neg_step * (exp_avg[i] / denom);
  }
}

// torch.optim.Adam / AdamW (amsgrad off).
class Adam : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, bool decoupled)
      : lr_(c.lr),
        beta1_(c.beta1),
        beta2_(c.beta2),
        eps_(c.eps),
        wd_(c.weight_decay),
        decoupled_(decoupled) {}
  int state_slots() const override { return 2; }
  double configured_lr() const override { return lr_; }
  void Apply(float* p, const float* g, float* const* state, size_t n, uint64_t step,
             double lr) const override {
    const double bc1 = 1 - std::pow(beta1_, static_cast<double>(step));
    const double bc2 = 1 - std::pow(beta2_, static_cast<double>(step));
    AdamStep k;
    k.b1 = beta1_, k.b2 = beta2_, k.one_b1 = 1 - beta1_, k.one_b2 = 1 - beta2_;
    k.eps = eps_, k.wd = wd_;
    k.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
    k.neg_step = static_cast<float>(-(lr / bc1));
    k.decay = static_cast<float>(1 - lr * wd_);
    k.decoupled = decoupled_;
    AdamLoop(k, p, g, state[0], state[1], n);
  }

 private:
  double lr_, beta1_, beta2_, eps_, wd_;
  bool decoupled_;
};

// torch.optim.Adagrad.
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(const OptimizerConfig& c)
      : lr_(c.lr),
        lr_decay_(c.lr_decay),
        wd_(c.weight_decay),
        eps_(c.eps),
        initial_(c.initial_accumulator) {}
  int state_slots() const override { return 1; }
  void InitState(float* const* state, size_t n) const override {
    for (size_t i = 0; i < n; ++i) state[0][i] = static_cast<float>(initial_);
  }
  double configured_lr() const override { return lr_; }
  void Apply(float* p, const float* g, float* const* state, size_t n, uint64_t step,
             double lr) const override {
    float* sum = state[0];
    const float neg_clr = static_cast<float>(-(lr / (1 + (step - 1) * lr_decay_)));
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
    case OptimizerConfig::Kind::kSgd:
      return std::unique_ptr<Optimizer>(new Sgd(config));
    case OptimizerConfig::Kind::kAdam:
      return std::unique_ptr<Optimizer>(new Adam(config, false));
    case OptimizerConfig::Kind::kAdamW:
      return std::unique_ptr<Optimizer>(new Adam(config, true));
    case OptimizerConfig::Kind::kAdagrad:
      return std::unique_ptr<Optimizer>(new Adagrad(config));
    case OptimizerConfig::Kind::kSum:
      return std::unique_ptr<Optimizer>();
  }
  return InvalidArgument("unknown optimizer kind");
}

}  // namespace een::ps
