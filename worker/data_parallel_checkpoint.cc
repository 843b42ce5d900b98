// DataParallel's checkpoints: the server optimizer's state out of the job
// (optimizer_state(), CopyStateTo()) and a checkpoint into a job that
// starts (LoadState(), LoadStateFrom()), in torch::optim's terms
// (worker/torch_optimizer_state.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "worker/data_parallel_impl.h"
#include "worker/torch_optimizer_state.h"

namespace een {

std::vector<ParameterState> DataParallel::Impl::OptimizerState() {
  if (SumMode()) {
    throw Error(
        "een: optimizer_state(): in sum mode the parameter servers hold no optimizer state: "
        "your own torch optimizer has it (save its state_dict())",
        Error::Code::kFailedPrecondition);
  }
  std::vector<ParameterState> out;
  std::vector<int> index(tensors_.size(), -1);  // tensor -> its entry in `out`
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const Registered& r = tensors_[t];
    if (r.kind != TensorKind::kParameter) continue;
    if (local_) {
      out.push_back(ReadTorchState(*local_->optimizer(), r.tensor, r.name, optimizer_));
      continue;
    }
    index[t] = static_cast<int>(out.size());
    out.push_back({r.name, torch::empty(r.tensor.sizes(), torch::kFloat), 0, {}});
  }
  if (local_) return out;
  const std::vector<std::string> slot_names = StateSlotNames(optimizer_);
  for (ParameterState& p : out) {
    for (const std::string& name : slot_names) p.state[name] = torch::empty_like(p.value);
  }
  std::vector<uint64_t> lowest(out.size(), UINT64_MAX);
  auto take = [&](uint32_t chunk, uint64_t version, const float* data, uint32_t slots) {
    const Chunk& c = client_->map().chunks()[chunk];
    const int i = index.at(c.tensor);
    if (i < 0) return Status::Ok();  // a buffer or frozen parameter: not optimizer state
    if (slots != slot_names.size()) {
      return Internal("a PS keeps " + std::to_string(slots) + " optimizer state slots; the " +
                      "job's optimizer has " + std::to_string(slot_names.size()));
    }
    ParameterState& p = out[i];
    std::memcpy(p.value.data_ptr<float>() + c.offset, data, size_t{c.numel} * sizeof(float));
    for (uint32_t k = 0; k < slots; ++k) {
      std::memcpy(p.state[slot_names[k]].data_ptr<float>() + c.offset,
                  data + size_t{c.numel} * (k + 1), size_t{c.numel} * sizeof(float));
    }
    lowest[i] = std::min(lowest[i], version);
    return Status::Ok();
  };
  // Between steps: no push of this step to resend after a failover.
  ThroughPsLoss([&](int) { return client_->PullState(step_, take); }, "pulling a checkpoint",
                [&](uint64_t step) { RollBack(step); });  // throws RolledBack
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].step = static_cast<int64_t>(lowest[i] == UINT64_MAX ? 0 : lowest[i]);
    // Before its first step torch has no state for a parameter (Adagrad's
    // accumulator aside); the PS's slots are still their initial zeros.
    if (out[i].step == 0 && optimizer_.kind != OptimizerConfig::Kind::kAdagrad) {
      out[i].state.clear();
    }
  }
  return out;
}

std::vector<ParameterState> DataParallel::Impl::TorchOptimizerState(
    const torch::optim::Optimizer& optimizer) const {
  if (std::string why = TorchKindMismatch(optimizer, optimizer_); !why.empty()) {
    throw Error("een: LoadStateFrom(): " + why, Error::Code::kInvalidArgument);
  }
  std::vector<ParameterState> states;
  for (const Registered& r : tensors_) {
    if (r.kind != TensorKind::kParameter) continue;
    ParameterState s = ReadTorchState(optimizer, r.tensor, r.name, optimizer_);
    if (!s.state.empty()) states.push_back(std::move(s));
  }
  return states;
}

void DataParallel::Impl::CopyStateTo(torch::optim::Optimizer& optimizer) {
  if (std::string why = TorchKindMismatch(optimizer, optimizer_); !why.empty()) {
    throw Error("een: CopyStateTo(): " + why, Error::Code::kInvalidArgument);
  }
  const std::vector<ParameterState> states = OptimizerState();
  std::map<const c10::TensorImpl*, const ParameterState*> by_parameter;
  size_t next = 0;
  for (const Registered& r : tensors_) {
    if (r.kind == TensorKind::kParameter)
      by_parameter[r.tensor.unsafeGetTensorImpl()] = &states[next++];
  }
  for (auto& group : optimizer.param_groups()) {
    group.options().set_lr(LearningRate());
    for (const torch::Tensor& p : group.params()) {
      auto it = by_parameter.find(p.unsafeGetTensorImpl());
      if (it != by_parameter.end()) {
        WriteTorchState(optimizer, p, *it->second, optimizer_);
      } else if (p.numel() > 0 && p.requires_grad()) {
        throw Error(
            "een: CopyStateTo(): the optimizer holds a parameter the module DataParallel trains "
            "does not have: make the optimizer over module->parameters()",
            Error::Code::kInvalidArgument);
      }
    }
  }
}

bool DataParallel::Impl::TakesCheckpoint() const {
  if (step_ != 0 || backward_seen_) return false;
  return local_ || (!client_->resumed() && !client_->joining());
}

namespace {

// The states by parameter name, checked against the module and the job's
// optimizer: each names a trainable parameter once, with its shape, and
// holds the optimizer's slots (or none).
std::map<std::string, const ParameterState*> CheckStates(
    const std::vector<ParameterState>& states, const std::map<std::string, torch::Tensor>& trained,
    const std::vector<std::string>& slot_names) {
  std::map<std::string, const ParameterState*> by_name;
  for (const ParameterState& s : states) {
    auto parameter = trained.find(s.name);
    if (parameter == trained.end()) {
      throw Error("een: the checkpoint has a state for '" + s.name +
                      "', which is not a parameter this module trains",
                  Error::Code::kInvalidArgument);
    }
    if (!by_name.emplace(s.name, &s).second) {
      throw Error("een: the checkpoint has two states for '" + s.name + "'",
                  Error::Code::kInvalidArgument);
    }
    if (s.step < 0) {
      throw Error("een: the checkpoint's step for '" + s.name + "' is negative",
                  Error::Code::kInvalidArgument);
    }
    const int64_t numel = parameter->second.numel();
    if (s.value.defined() && s.value.numel() != numel) {
      throw Error("een: the checkpoint's '" + s.name + "' has " + std::to_string(s.value.numel()) +
                      " values; the module's has " + std::to_string(numel),
                  Error::Code::kInvalidArgument);
    }
    if (s.state.empty()) continue;
    std::vector<std::string> names;
    for (const auto& [name, tensor] : s.state) names.push_back(name);
    std::vector<std::string> want = slot_names;
    std::sort(want.begin(), want.end());
    if (names != want) {
      std::string have, job;
      for (const std::string& n : names) have += (have.empty() ? "" : ", ") + n;
      for (const std::string& n : want) job += (job.empty() ? "" : ", ") + n;
      throw Error("een: the checkpoint's optimizer state of '" + s.name + "' holds {" + have +
                      "}; the job's optimizer keeps {" + job +
                      "}: was it saved with another optimizer?",
                  Error::Code::kInvalidArgument);
    }
    for (const auto& [name, tensor] : s.state) {
      if (!tensor.defined() || tensor.numel() != numel) {
        throw Error("een: the checkpoint's '" + name + "' of '" + s.name +
                        "' does not have the parameter's " + std::to_string(numel) + " elements",
                    Error::Code::kInvalidArgument);
      }
    }
  }
  return by_name;
}

// `t` as contiguous float32 on the CPU, flat.
torch::Tensor HostFloats(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU, torch::kFloat).contiguous().reshape({-1});
}

}  // namespace

bool DataParallel::Impl::LoadState(const std::vector<ParameterState>& states) {
  if (!TakesCheckpoint()) {
    if (step_ != 0 || backward_seen_) {
      throw Error(
          "een: load_state(): a checkpoint is loaded before the first step (this worker is at "
          "step " +
              std::to_string(step_) + ")",
          Error::Code::kFailedPrecondition);
    }
    spdlog::info("not loading the checkpoint: this {} ",
                 client_->joining() ? "worker joins a running job, whose state is newer"
                                    : "job resumed from its own snapshot, which is newer");
    return false;
  }
  RehookIfReplaced();  // the program may have loaded the module with torch::load
  std::map<std::string, torch::Tensor> trained;
  for (const Registered& r : tensors_) {
    if (r.kind == TensorKind::kParameter) trained.emplace(r.name, r.tensor);
  }
  const std::vector<std::string> slot_names = StateSlotNames(optimizer_);
  const auto by_name = CheckStates(states, trained, slot_names);
  // The job goes on from the newest step; SGD's momentum is used from its
  // second step on (torch's keeps no step count: its buffers mean >= 1).
  int64_t step = 0;
  bool any_state = false;
  for (const auto& [name, s] : by_name) {
    step = std::max(step, s->step);
    any_state |= !s->state.empty();
  }
  if (any_state && step == 0) step = 1;
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, s] : by_name) {
      if (s->value.defined()) {
        torch::Tensor p = trained.at(name);
        p.copy_(s->value.reshape(p.sizes()));
      }
    }
  }
  if (local_) {
    if (torch::optim::Optimizer* optimizer = local_->optimizer()) {
      for (const auto& [name, s] : by_name) {
        ParameterState at_step = *s;
        at_step.step = step;
        WriteTorchState(*optimizer, trained.at(name), at_step, optimizer_);
      }
    }
    step_ = static_cast<uint64_t>(step);
    NoteParameterVersions();
    return true;
  }
  // Each chunk's values (the module's, as loaded) and optimizer slots.
  const ShardMap& map = client_->map();
  auto chunks = std::make_shared<WorkerClient::ChunkStates>(map.chunks().size());
  for (uint32_t t = 0; t < tensors_.size(); ++t) {
    const Registered& r = tensors_[t];
    const torch::Tensor values = HostFloats(r.tensor);
    std::vector<torch::Tensor> slots;
    if (r.kind == TensorKind::kParameter) {
      auto s = by_name.find(r.name);
      for (const std::string& name : slot_names) {
        slots.push_back(s == by_name.end() || s->second->state.empty()
                            ? torch::zeros({r.tensor.numel()})
                            : HostFloats(s->second->state.at(name)));
      }
    }
    for (uint32_t c = map.FirstChunkOf(t); c < map.FirstChunkOf(t) + map.ChunkCountOf(t); ++c) {
      const Chunk& chunk = map.chunks()[c];
      std::vector<float>& data = (*chunks)[c];
      data.resize(size_t{chunk.numel} * (1 + slots.size()));
      std::memcpy(data.data(), values.data_ptr<float>() + chunk.offset,
                  size_t{chunk.numel} * sizeof(float));
      for (size_t k = 0; k < slots.size(); ++k) {
        std::memcpy(data.data() + size_t{chunk.numel} * (k + 1),
                    slots[k].data_ptr<float>() + chunk.offset, size_t{chunk.numel} * sizeof(float));
      }
    }
  }
  // Worker 0 sends them; every worker then pulls them (the others wait there
  // until they are in), through a PS lost meanwhile.
  ThroughPsLoss(
      [&](int recoveries) {
        if (client_->rank() == 0) {
          EEN_RETURN_IF_ERROR(client_->PushState(step, chunks, /*again=*/recoveries > 0));
        }
        return PullEverything(step, /*gradients=*/false);
      },
      "loading a checkpoint",
      [](uint64_t) {
        throw Error(
            "een: a PS was lost while the checkpoint was loaded, and the job rolled back: "
            "start it again",
            Error::Code::kAborted);
      });
  StorePulled(false);
  step_ = static_cast<uint64_t>(step);
  NoteParameterVersions();
  spdlog::info("started from a checkpoint of step {} ({} parameters with optimizer state)", step,
               by_name.size());
  return true;
}

std::vector<ParameterState> DataParallel::optimizer_state() {
  impl_->CheckNotLeft("optimizer_state()");
  return impl_->OptimizerState();
}
bool DataParallel::LoadState(const std::vector<ParameterState>& states) {
  impl_->CheckNotLeft("LoadState()");
  return impl_->LoadState(states);
}
bool DataParallel::takes_checkpoint() const { return !impl_->left_ && impl_->TakesCheckpoint(); }
bool DataParallel::LoadStateFrom(const torch::optim::Optimizer& optimizer) {
  impl_->CheckNotLeft("LoadStateFrom()");
  return impl_->LoadState(impl_->TorchOptimizerState(optimizer));
}
void DataParallel::CopyStateTo(torch::optim::Optimizer& optimizer) {
  impl_->CheckNotLeft("CopyStateTo()");
  impl_->CopyStateTo(optimizer);
}

}  // namespace een
