#include "worker/checkpoint_export.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/input_file.h"
#include "common/model_layout.h"
#include "common/snapshot_store.h"
#include "worker/torch_optimizer_state.h"

namespace een {
namespace {

using Kind = OptimizerConfig::Kind;

constexpr size_t kMaxLayoutBytes = size_t{64} << 20;

// Each PS's store in the folder (ps-N/), read-only, by folder name.
Result<std::map<std::string, std::unique_ptr<SnapshotStore>>> OpenStores(const std::string& dir) {
  std::map<std::string, std::unique_ptr<SnapshotStore>> stores;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ps-", 0) != 0 || !entry.is_directory(ec)) continue;
    auto store = SnapshotStore::OpenForReading(entry.path().string());
    if (store.status().code() == StatusCode::kNotFound) continue;  // a PS that wrote none
    if (!store.ok()) return store.status();
    stores.emplace(name, std::move(*store));
  }
  if (ec) return Unavailable("cannot list " + dir + ": " + ec.message());
  if (stores.empty()) {
    return NotFound(dir + " holds no PS snapshots yet (no ps-N/ store with a snapshot in it)");
  }
  return stores;
}

// Every chunk's image at `step`, from whichever store has it; the chunks
// no store has at that step, when some are missing.
struct Images {
  std::vector<std::optional<ChunkImage>> by_chunk;
  size_t missing = 0;
};
Result<Images> ImagesAt(const std::map<std::string, std::unique_ptr<SnapshotStore>>& stores,
                        const std::map<std::string, std::vector<uint64_t>>& intact, uint64_t step,
                        size_t chunks) {
  Images images{std::vector<std::optional<ChunkImage>>(chunks), chunks};
  for (const auto& [name, store] : stores) {
    const std::vector<uint64_t>& steps = intact.at(name);
    if (std::find(steps.begin(), steps.end(), step) == steps.end()) continue;
    EEN_ASSIGN_OR_RETURN(std::vector<ChunkImage> read, store->Read(step));
    for (ChunkImage& image : read) {
      if (image.chunk >= chunks) {
        return DataLoss(name + "'s snapshot of step " + std::to_string(step) + " holds chunk " +
                        std::to_string(image.chunk) + ", which the model layout lacks (" +
                        std::to_string(chunks) + " chunks): is this folder one job's?");
      }
      if (!images.by_chunk[image.chunk]) {
        images.by_chunk[image.chunk] = std::move(image);
        --images.missing;
      }
    }
  }
  return images;
}

// The step to export and its images: `wanted`, or the newest step at which
// every chunk has an intact snapshot on some PS.
Result<std::pair<uint64_t, Images>> PickStep(const std::string& dir, size_t chunks, uint32_t num_ps,
                                             std::optional<uint64_t> wanted) {
  EEN_ASSIGN_OR_RETURN(auto stores, OpenStores(dir));
  std::map<std::string, std::vector<uint64_t>> intact;
  std::set<uint64_t, std::greater<>> candidates;
  std::string found;  // "ps-0: steps 20, 10; ps-1: ..." for the errors
  for (const auto& [name, store] : stores) {
    std::vector<std::string> problems;
    intact[name] = store->IntactSteps(&problems);
    found += (found.empty() ? "" : "; ") + name + ": ";
    if (intact[name].empty()) found += "no whole snapshot";
    for (size_t k = 0; k < intact[name].size(); ++k) {
      found += (k ? ", " : "steps ") + std::to_string(intact[name][k]);
      candidates.insert(intact[name][k]);
    }
    for (const std::string& p : problems) found += " (" + p + ")";
  }
  for (uint32_t p = 0; p < num_ps; ++p) {  // the job's PS at its start
    if (!stores.count("ps-" + std::to_string(p))) found += "; ps-" + std::to_string(p) + ": none";
  }
  if (wanted) candidates = {*wanted};
  for (uint64_t step : candidates) {
    EEN_ASSIGN_OR_RETURN(Images images, ImagesAt(stores, intact, step, chunks));
    if (images.missing == 0) return std::make_pair(step, std::move(images));
  }
  return NotFound((wanted ? "no whole snapshot of step " + std::to_string(*wanted)
                          : std::string("no step at which every chunk has a whole snapshot")) +
                  " in " + dir + " (" + found + ")");
}

c10::impl::GenericDict ParamGroup(const OptimizerConfig& o, int64_t parameters) {
  c10::impl::GenericDict g(c10::StringType::get(), c10::AnyType::get());
  g.insert("lr", o.lr);
  switch (o.kind) {
    case Kind::kSgd:
      g.insert("momentum", o.momentum);
      g.insert("dampening", o.dampening);
      g.insert("weight_decay", o.weight_decay);
      g.insert("nesterov", o.nesterov);
      break;
    case Kind::kAdam:
    case Kind::kAdamW:
      g.insert("betas", c10::ivalue::Tuple::create({o.beta1, o.beta2}));
      g.insert("eps", o.eps);
      g.insert("weight_decay", o.weight_decay);
      g.insert("amsgrad", false);
      break;
    case Kind::kAdagrad:
      g.insert("lr_decay", o.lr_decay);
      g.insert("weight_decay", o.weight_decay);
      g.insert("initial_accumulator_value", o.initial_accumulator);
      g.insert("eps", o.eps);
      break;
    case Kind::kSum:
      break;
  }
  g.insert("maximize", false);
  g.insert("foreach", c10::IValue());
  g.insert("differentiable", false);
  std::vector<int64_t> params(static_cast<size_t>(parameters));
  for (int64_t i = 0; i < parameters; ++i) params[static_cast<size_t>(i)] = i;
  g.insert("params", c10::List<int64_t>(params));
  return g;
}

}  // namespace

Result<ExportedCheckpoint> ExportCheckpoint(const std::string& snapshot_dir,
                                            std::optional<uint64_t> step) {
  const std::string layout_path = snapshot_dir + "/" + kModelLayoutFile;
  std::error_code ec;
  if (!std::filesystem::is_directory(snapshot_dir, ec)) {
    return NotFound("the snapshot folder " + snapshot_dir + " does not exist (or is no folder)");
  }
  if (!std::filesystem::exists(layout_path, ec)) {
    return NotFound("no model layout in " + snapshot_dir + " (the coordinator writes " +
                    kModelLayoutFile +
                    " there when a job with --snapshot-every starts): is it a snapshot folder "
                    "of een-launch, from this version, or of a torch.distributed job (which has "
                    "no model)?");
  }
  EEN_ASSIGN_OR_RETURN(std::string bytes,
                       ReadInputFile(layout_path, "the model layout", kMaxLayoutBytes));
  EEN_ASSIGN_OR_RETURN(ModelLayout layout, DecodeModelLayout(bytes, layout_path));
  const ShardMap& map = layout.map;
  const OptimizerConfig& optimizer = layout.optimizer;
  if (optimizer.kind == Kind::kSum) {
    return FailedPrecondition(
        "the job of " + snapshot_dir +
        " ran in sum mode: its model and optimizer live in the workers, and the PS's snapshots "
        "hold neither; save them from the program (model.state_dict(), optimizer.state_dict())");
  }
  EEN_ASSIGN_OR_RETURN(auto picked,
                       PickStep(snapshot_dir, map.chunks().size(), map.num_ps(), step));
  auto& [at, images] = picked;

  const bool sum = optimizer.kind == Kind::kSum;
  const std::vector<std::string> slots = StateSlotNames(optimizer);
  std::vector<torch::Tensor> values;
  std::vector<std::vector<torch::Tensor>> states;  // by tensor, by slot
  std::vector<uint64_t> lowest(map.tensors().size(), UINT64_MAX);
  for (const TensorInfo& t : map.tensors()) {
    values.push_back(torch::empty({static_cast<int64_t>(t.numel)}, torch::kFloat));
    states.emplace_back();
    if (t.kind != TensorKind::kParameter) continue;
    for (size_t k = 0; k < slots.size(); ++k)
      states.back().push_back(torch::empty_like(values.back()));
  }
  for (size_t c = 0; c < map.chunks().size(); ++c) {
    const Chunk& chunk = map.chunks()[c];
    const ChunkImage& image = *images.by_chunk[c];
    const size_t kept = states[chunk.tensor].size();  // optimizer slots kept with the values
    // (A buffer or frozen parameter keeps its slots too on the PS: any count is taken.)
    if (image.data.size() % chunk.numel != 0 || image.data.size() / chunk.numel < 1 + kept) {
      return DataLoss("the snapshot of step " + std::to_string(at) + " holds chunk " +
                      std::to_string(c) + " with " + std::to_string(image.data.size()) +
                      " floats; the model layout says " + std::to_string(chunk.numel) +
                      " values and " + std::to_string(kept) + " optimizer slot(s) each");
    }
    std::memcpy(values[chunk.tensor].data_ptr<float>() + chunk.offset, image.data.data(),
                size_t{chunk.numel} * sizeof(float));
    for (size_t k = 0; k < kept; ++k) {
      std::memcpy(states[chunk.tensor][k].data_ptr<float>() + chunk.offset,
                  image.data.data() + size_t{chunk.numel} * (k + 1),
                  size_t{chunk.numel} * sizeof(float));
    }
    lowest[chunk.tensor] = std::min(lowest[chunk.tensor], image.version);
  }

  c10::impl::GenericDict model(c10::StringType::get(), c10::TensorType::get());
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  int64_t parameters = 0;  // module.parameters() numbering: frozen ones too
  for (size_t t = 0; t < map.tensors().size(); ++t) {
    const TensorInfo& info = map.tensors()[t];
    const bool shaped = !info.shape.empty();
    torch::Tensor value = shaped ? values[t].view(info.shape) : values[t];
    model.insert(info.name, value);
    if (info.kind != TensorKind::kParameter && info.kind != TensorKind::kFrozen) continue;
    const int64_t index = parameters++;
    if (sum || info.kind != TensorKind::kParameter || slots.empty()) continue;
    const uint64_t taken = lowest[t] == UINT64_MAX ? 0 : lowest[t];
    // Before its first step torch has no state for a parameter (Adagrad's accumulator aside).
    if (taken == 0 && optimizer.kind != Kind::kAdagrad) continue;
    c10::impl::GenericDict s(c10::StringType::get(), c10::TensorType::get());
    for (size_t k = 0; k < slots.size(); ++k) {
      s.insert(slots[k], shaped ? states[t][k].view(info.shape) : states[t][k]);
    }
    s.insert("step", torch::tensor(static_cast<double>(taken), torch::kFloat));
    state.insert(index, s);
  }
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("model", model);
  if (sum) {
    checkpoint.insert("optimizer", c10::IValue());
  } else {
    c10::impl::GenericDict torch_optimizer(c10::StringType::get(), c10::AnyType::get());
    torch_optimizer.insert("state", state);
    c10::impl::GenericList groups(c10::AnyType::get());
    groups.push_back(ParamGroup(optimizer, parameters));
    torch_optimizer.insert("param_groups", groups);
    checkpoint.insert("optimizer", torch_optimizer);
  }
  return ExportedCheckpoint{torch::jit::pickle_save(checkpoint), at, map.tensors().size()};
}

}  // namespace een
