#include "common/optimizer_wire.h"

#include <cmath>

namespace een {
namespace {

wire::OptimizerKind KindToWire(OptimizerConfig::Kind k) {
  switch (k) {
    case OptimizerConfig::Kind::kSgd:
      return wire::OptimizerKind::SGD;
    case OptimizerConfig::Kind::kAdam:
      return wire::OptimizerKind::ADAM;
    case OptimizerConfig::Kind::kAdamW:
      return wire::OptimizerKind::ADAMW;
    case OptimizerConfig::Kind::kAdagrad:
      return wire::OptimizerKind::ADAGRAD;
    case OptimizerConfig::Kind::kSum:
      return wire::OptimizerKind::SUM;
  }
  return wire::OptimizerKind::SGD;
}

}  // namespace

const char* OptimizerName(OptimizerConfig::Kind kind) {
  switch (kind) {
    case OptimizerConfig::Kind::kSgd:
      return "sgd";
    case OptimizerConfig::Kind::kAdam:
      return "adam";
    case OptimizerConfig::Kind::kAdamW:
      return "adamw";
    case OptimizerConfig::Kind::kAdagrad:
      return "adagrad";
    case OptimizerConfig::Kind::kSum:
      return "sum";
  }
  return "unknown";
}

void OptimizerToWire(const OptimizerConfig& c, wire::OptimizerConfig::Builder b) {
  b.setKind(KindToWire(c.kind));
  b.setLr(c.lr);
  b.setMomentum(c.momentum);
  b.setDampening(c.dampening);
  b.setNesterov(c.nesterov);
  b.setWeightDecay(c.weight_decay);
  b.setBeta1(c.beta1);
  b.setBeta2(c.beta2);
  b.setEps(c.eps);
  b.setLrDecay(c.lr_decay);
  b.setInitialAccumulator(c.initial_accumulator);
  b.setClipGradNorm(c.clip_grad_norm);
}

Result<OptimizerConfig> OptimizerFromWire(wire::OptimizerConfig::Reader r) {
  OptimizerConfig c;
  switch (r.getKind()) {
    case wire::OptimizerKind::SGD:
      c.kind = OptimizerConfig::Kind::kSgd;
      break;
    case wire::OptimizerKind::ADAM:
      c.kind = OptimizerConfig::Kind::kAdam;
      break;
    case wire::OptimizerKind::ADAMW:
      c.kind = OptimizerConfig::Kind::kAdamW;
      break;
    case wire::OptimizerKind::ADAGRAD:
      c.kind = OptimizerConfig::Kind::kAdagrad;
      break;
    case wire::OptimizerKind::SUM:
      c.kind = OptimizerConfig::Kind::kSum;
      break;
    default:
      return InvalidArgument("unknown optimizer kind " + std::to_string(int(r.getKind())));
  }
  c.lr = r.getLr();
  c.momentum = r.getMomentum();
  c.dampening = r.getDampening();
  c.nesterov = r.getNesterov();
  c.weight_decay = r.getWeightDecay();
  c.beta1 = r.getBeta1();
  c.beta2 = r.getBeta2();
  c.eps = r.getEps();
  c.lr_decay = r.getLrDecay();
  c.initial_accumulator = r.getInitialAccumulator();
  c.clip_grad_norm = r.getClipGradNorm();
  EEN_RETURN_IF_ERROR(ValidateOptimizer(c));
  return c;
}

Status ValidateOptimizer(const OptimizerConfig& c) {
  auto bad = [&](const char* field, const char* rule) {
    return InvalidArgument(std::string("optimizer ") + OptimizerName(c.kind) + ": " + field + " " +
                           rule);
  };
  auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(c.lr) || c.lr < 0) return bad("lr", "must be a finite number >= 0");
  if (!finite(c.momentum) || c.momentum < 0) return bad("momentum", "must be >= 0");
  if (!finite(c.weight_decay) || c.weight_decay < 0) return bad("weight_decay", "must be >= 0");
  if (c.nesterov && (c.momentum <= 0 || c.dampening != 0)) {
    return bad("nesterov", "needs momentum > 0 and dampening 0 (as in torch)");
  }
  if (!(c.beta1 >= 0 && c.beta1 < 1)) return bad("beta1", "must be in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) return bad("beta2", "must be in [0, 1)");
  if (!finite(c.eps) || c.eps < 0) return bad("eps", "must be >= 0");
  if (!finite(c.clip_grad_norm) || c.clip_grad_norm < 0) {
    return bad("clip_grad_norm", "must be a finite number >= 0 (0: no clipping)");
  }
  if (c.clip_grad_norm > 0 && c.kind == OptimizerConfig::Kind::kSum) {
    return bad("clip_grad_norm",
               "does not apply in sum mode: Step() leaves the mean gradient in "
               ".grad, clip it there with torch::nn::utils::clip_grad_norm_");
  }
  return Status::Ok();
}

}  // namespace een
