#include "worker/torch_optimizer_state.h"

#include <c10/util/string_utils.h>

namespace een {
namespace {

using Kind = OptimizerConfig::Kind;

// torch::optim's key for a parameter's state.
std::string KeyOf(const torch::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}

torch::Tensor CpuCopy(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU, torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

const torch::Tensor& Slot(const ParameterState& state, const std::string& name) {
  auto it = state.state.find(name);
  if (it == state.state.end() || !it->second.defined()) {
    throw Error("een: the optimizer state of '" + state.name + "' has no '" + name + "'",
                Error::Code::kInvalidArgument);
  }
  return it->second;
}

// Adam's and AdamW's states have the same fields in two types.
template <typename AdamParamState, typename Like>
std::unique_ptr<AdamParamState> AdamState(const ParameterState& state, const Like& like) {
  auto s = std::make_unique<AdamParamState>();
  s->step(state.step);
  s->exp_avg(like(Slot(state, "exp_avg")));
  s->exp_avg_sq(like(Slot(state, "exp_avg_sq")));
  return s;
}
template <typename AdamParamState>
void ReadAdam(const AdamParamState* adam, ParameterState& out) {
  if (!adam) return;
  out.step = adam->step();
  out.state["exp_avg"] = CpuCopy(adam->exp_avg());
  out.state["exp_avg_sq"] = CpuCopy(adam->exp_avg_sq());
}

}  // namespace

std::vector<std::string> StateSlotNames(const OptimizerConfig& config) {
  switch (config.kind) {
    case Kind::kSgd:
      if (config.momentum != 0) return {"momentum_buffer"};
      return {};
    case Kind::kAdam:
    case Kind::kAdamW:
      return {"exp_avg", "exp_avg_sq"};
    case Kind::kAdagrad:
      return {"sum"};
    case Kind::kSum:
      return {};
  }
  return {};
}

std::string TorchKindMismatch(const torch::optim::Optimizer& optimizer,
                              const OptimizerConfig& config) {
  const torch::optim::Optimizer* o = &optimizer;
  bool same = false;
  const char* want = "";
  switch (config.kind) {
    case Kind::kSgd:
      same = dynamic_cast<const torch::optim::SGD*>(o) != nullptr;
      want = "torch::optim::SGD";
      break;
    case Kind::kAdam:
      same = dynamic_cast<const torch::optim::Adam*>(o) != nullptr;
      want = "torch::optim::Adam";
      break;
    case Kind::kAdamW:
      same = dynamic_cast<const torch::optim::AdamW*>(o) != nullptr;
      want = "torch::optim::AdamW";
      break;
    case Kind::kAdagrad:
      same = dynamic_cast<const torch::optim::Adagrad*>(o) != nullptr;
      want = "torch::optim::Adagrad";
      break;
    case Kind::kSum:
      return "in sum mode the job has no server optimizer: your own optimizer holds the state";
  }
  if (same) return "";
  return std::string("the job's server optimizer is ") + want +
         "'s equivalent: give an optimizer of that kind";
}

void WriteTorchState(torch::optim::Optimizer& optimizer, const torch::Tensor& parameter,
                     const ParameterState& state, const OptimizerConfig& config) {
  auto& states = optimizer.state();
  const std::string key = KeyOf(parameter);
  if (state.state.empty()) {
    states.erase(key);
    return;
  }
  auto like = [&](const torch::Tensor& t) {
    return t.to(parameter.device(), parameter.scalar_type()).reshape(parameter.sizes()).clone();
  };
  switch (config.kind) {
    case Kind::kSgd: {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(like(Slot(state, "momentum_buffer")));
      states[key] = std::move(s);
      break;
    }
    case Kind::kAdam:
      states[key] = AdamState<torch::optim::AdamParamState>(state, like);
      break;
    case Kind::kAdamW:
      states[key] = AdamState<torch::optim::AdamWParamState>(state, like);
      break;
    case Kind::kAdagrad: {
      auto s = std::make_unique<torch::optim::AdagradParamState>();
      s->step(state.step);
      s->sum(like(Slot(state, "sum")));
      states[key] = std::move(s);
      break;
    }
    case Kind::kSum:
      break;
  }
}

ParameterState ReadTorchState(const torch::optim::Optimizer& optimizer,
                              const torch::Tensor& parameter, const std::string& name,
                              const OptimizerConfig& config) {
  ParameterState out;
  out.name = name;
  out.value = CpuCopy(parameter);
  const auto& states = optimizer.state();
  auto it = states.find(KeyOf(parameter));
  if (it == states.end() || !it->second) return out;
  const torch::optim::OptimizerParamState* s = it->second.get();
  switch (config.kind) {
    case Kind::kSgd:
      if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(s)) {
        if (sgd->momentum_buffer().defined()) {
          out.state["momentum_buffer"] = CpuCopy(sgd->momentum_buffer());
        }
      }
      break;
    case Kind::kAdam:
      ReadAdam(dynamic_cast<const torch::optim::AdamParamState*>(s), out);
      break;
    case Kind::kAdamW:
      ReadAdam(dynamic_cast<const torch::optim::AdamWParamState*>(s), out);
      break;
    case Kind::kAdagrad:
      if (auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(s)) {
        out.step = adagrad->step();
        out.state["sum"] = CpuCopy(adagrad->sum());
      }
      break;
    case Kind::kSum:
      break;
  }
  return out;
}

}  // namespace een
