#include "ps/chunk_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "common/wire_dtype.h"
#include "ps/step_kernel.h"

namespace een::ps {

Result<std::unique_ptr<ChunkStore>> ChunkStore::Create(const ShardMap& map, uint32_t ps,
                                                       int num_workers,
                                                       const OptimizerConfig& optimizer,
                                                       transport::Device* device) {
  if (num_workers < 1) return InvalidArgument("a PS needs at least one worker");
  std::unique_ptr<ChunkStore> store(new ChunkStore(map, num_workers));
  store->device_ = device;
  EEN_ASSIGN_OR_RETURN(store->optimizer_, Optimizer::Create(optimizer));
  store->max_norm_ = optimizer.clip_grad_norm;
  store->adam_ = optimizer.kind == OptimizerConfig::Kind::kAdam ||
                 optimizer.kind == OptimizerConfig::Kind::kAdamW;
  store->optimizer_config_ = optimizer;
  store->job_workers_ = num_workers;
  store->slot_of_.assign(map.chunks().size(), -1);
  EEN_RETURN_IF_ERROR(store->AddSlots(map.ChunksHeldBy(ps), ps));
  return store;
}

namespace {
// A frozen chunk's contribution: no bytes, but present (a null data() means "not in").
const std::byte kNoChange{0};

// Why an image of `floats` floats does not fit a chunk of `numel` values
// and `slots` optimizer state slots (another model, or another optimizer).
std::string WrongSize(size_t floats, uint32_t numel, size_t slots) {
  std::string why = "holds " + std::to_string(floats) + " floats where this job needs " +
                    std::to_string(size_t{numel} * (1 + slots)) + " (" + std::to_string(numel) +
                    " values and " + std::to_string(slots) +
                    " optimizer state slot(s) of each: sgd 0, sgd with momentum 1, adagrad 1, "
                    "adam and adamw 2)";
  if (numel > 0 && floats % numel == 0 && floats / numel >= 1) {
    why += ": it was taken with an optimizer of " + std::to_string(floats / numel - 1) +
           " state slot(s), or with another model";
  } else {
    why += ": it was taken with another model";
  }
  return why;
}
}  // namespace

size_t ChunkStore::ContributionBytes(uint32_t chunk, WireType type) const {
  const TensorKind kind = Kind(chunk);
  if (kind == TensorKind::kFrozen) return 0;
  return size_t{Numel(chunk)} * (IsBuffer(kind) ? sizeof(float) : WireBytes(type));
}

Status ChunkStore::AddSlots(const std::vector<uint32_t>& chunks, uint32_t ps) {
  // Only parameters have optimizer state.
  auto slots_per_chunk = [&](uint32_t c) {
    return 1 + (optimizer_ && Kind(c) == TensorKind::kParameter ? optimizer_->state_slots() : 0);
  };
  size_t bytes = 0;
  for (uint32_t c : chunks) bytes += slots_per_chunk(c) * Arena::BytesFor(map_.chunks()[c].numel);
  EEN_ASSIGN_OR_RETURN(Arena block, Arena::Create(bytes, device_));
  auto arena = std::make_shared<Arena>(std::move(block));
  arenas_.push_back(arena);
  for (uint32_t c : chunks) {
    const uint32_t n = map_.chunks()[c].numel;
    Slot s;
    s.primary = map_.OwnerOfChunk(c) == ps;
    s.kind = Kind(c);
    s.arena = arena;
    s.values = arena->Allocate(n);
    for (int k = 1; k < slots_per_chunk(c); ++k) s.state.push_back(arena->Allocate(n));
    if (!s.state.empty()) optimizer_->InitState(s.state.data(), n);
    s.contributions.resize(num_workers_);
    s.contribution_types.resize(num_workers_, WireType::kF32);
    s.worker_steps = join_step_;  // a worker's first step counts from its join
    s.applied_at.assign(num_workers_, 0);
    slot_of_[c] = static_cast<int32_t>(slots_.size());
    slots_.push_back(std::move(s));
  }
  return Status::Ok();
}

bool ChunkStore::AllInitialized() const {
  for (const Slot& s : slots_) {
    if (!s.initialized) return false;
  }
  return true;
}

size_t ChunkStore::arena_bytes() const {
  size_t total = 0;
  for (const auto& a : arenas_) total += a->size();
  return total;
}

Result<ChunkStore::Adoption> ChunkStore::Adopt(const ShardMap& next, uint32_t ps) {
  if (next.chunks().size() != map_.chunks().size()) {
    return InvalidArgument("the new shard map is for another model");
  }
  Adoption adoption;
  std::vector<Slot> kept;
  std::vector<int32_t> slot_of(next.chunks().size(), -1);
  std::vector<uint32_t> added;
  for (uint32_t c = 0; c < next.chunks().size(); ++c) {
    const bool primary = next.OwnerOfChunk(c) == ps;
    if (!primary && next.BackupOfChunk(c) != ps) continue;
    if (!Holds(c)) {
      added.push_back(c);
      continue;
    }
    Slot s = std::move(slots_[slot_of_[c]]);
    if (primary && !s.primary) adoption.promoted.push_back(c);
    if (!primary && s.primary) {  // moved to another PS, which this one now backs up
      for (auto& f : s.contributions) f = transport::Frame();
      s.awaiting_clip = false;  // the new owner aggregates the resent gradients
      s.acked = -1;
    }
    s.primary = primary;
    slot_of[c] = static_cast<int32_t>(kept.size());
    kept.push_back(std::move(s));
  }
  slots_ = std::move(kept);
  slot_of_ = std::move(slot_of);
  map_ = next;
  if (!added.empty()) EEN_RETURN_IF_ERROR(AddSlots(added, ps));
  for (uint32_t c : added) {
    if (Owns(c))
      return FailedPrecondition("chunk " + std::to_string(c) +
                                " moved here as primary without its state");
    adoption.new_backups.push_back(c);
  }
  return adoption;
}

Result<bool> ChunkStore::ApplyReplica(uint32_t chunk, uint64_t step, const transport::Frame& mean,
                                      double lr, double norm, int worker, uint64_t worker_step) {
  if (!BacksUp(chunk))
    return InvalidArgument("chunk " + std::to_string(chunk) + " is not backed up here");
  Slot& s = slots_[slot_of_[chunk]];
  const uint32_t n = Numel(chunk);
  if (mean.size() != ContributionBytes(chunk, WireType::kF32)) {
    return InvalidArgument("replicated mean of chunk " + std::to_string(chunk) + " has " +
                           std::to_string(mean.size()) + " bytes");
  }
  if (!s.initialized)
    return FailedPrecondition("chunk " + std::to_string(chunk) + " has no image yet");
  if (step < s.version) return false;
  if (step > s.version) {
    return FailedPrecondition("replicated step " + std::to_string(step) + " of chunk " +
                              std::to_string(chunk) + ", but the backup is at step " +
                              std::to_string(s.version));
  }
  if (consistency_.per_arrival()) {
    if (worker < 0 || worker >= num_workers_) {
      return InvalidArgument("replicated gradient of chunk " + std::to_string(chunk) +
                             " names worker " + std::to_string(worker));
    }
    s.worker_steps[worker] = worker_step + 1;
    s.applied_at[worker] = s.version + 1;
    s.last_worker = worker;
    s.last_worker_step = worker_step;
  }
  const float* m = reinterpret_cast<const float*>(mean.data());
  if (s.kind == TensorKind::kFrozen) {
    // nothing changes but the version
  } else if (IsBuffer(s.kind)) {
    std::memcpy(s.values, m, size_t{n} * sizeof(float));  // the primary's new values
    if (!optimizer_) std::memcpy(MeanBuffer(s, n), m, size_t{n} * sizeof(float));
  } else if (optimizer_) {
    s.applied_lr = lr >= 0 ? lr : optimizer_->configured_lr();
    optimizer_->Apply(s.values, m, s.state.data(), n, s.version + 1, s.applied_lr);
  } else {
    std::memcpy(MeanBuffer(s, n), m, size_t{n} * sizeof(float));
  }
  s.applied_norm = norm;  // the mean came clipped already; kept to answer NormOf
  s.norm_known = norm >= 0;
  s.version++;
  s.wire_fresh = false;
  return true;
}

float* ChunkStore::MeanBuffer(Slot& s, uint32_t n) {
  if (!s.mean || s.mean.use_count() > 1 || s.mean->size() != n) {
    s.mean = std::make_shared<std::vector<float>>(n);
  }
  return s.mean->data();
}

bool ChunkStore::HasContribution(uint32_t chunk, int worker) const {
  const Slot& s = SlotOf(chunk);
  return s.awaiting_clip || s.contributions[worker].data() != nullptr;
}

Status ChunkStore::SetInitial(uint32_t chunk, const transport::Frame& values) {
  if (!Owns(chunk)) return InvalidArgument("chunk " + std::to_string(chunk) + " is not here");
  Slot& s = slots_[slot_of_[chunk]];
  const uint32_t n = Numel(chunk);
  if (values.size() != n * sizeof(float)) {
    return InvalidArgument("initial values of chunk " + std::to_string(chunk) + ": " +
                           std::to_string(values.size()) + " bytes, expected " +
                           std::to_string(n * sizeof(float)));
  }
  if (s.initialized) {
    return FailedPrecondition("chunk " + std::to_string(chunk) + " is already initialized");
  }
  std::memcpy(s.values, values.data(), values.size());
  s.initialized = true;
  s.wire_fresh = false;
  return Status::Ok();
}

Result<bool> ChunkStore::AddGradient(uint32_t chunk, int worker, uint64_t step,
                                     transport::Frame grad) {
  EEN_ASSIGN_OR_RETURN(bool complete, Contribute(chunk, worker, step, std::move(grad)));
  if (complete) ApplySteps({chunk});
  return complete;
}

Result<bool> ChunkStore::Contribute(uint32_t chunk, int worker, uint64_t step,
                                    transport::Frame grad, WireType type, double lr) {
  if (!Owns(chunk)) return InvalidArgument("chunk " + std::to_string(chunk) + " is not here");
  if (worker < 0 || worker >= num_workers_) {
    return InvalidArgument("worker rank " + std::to_string(worker) + " out of range");
  }
  Slot& s = slots_[slot_of_[chunk]];
  if (!s.initialized) {
    return FailedPrecondition("chunk " + std::to_string(chunk) + " has no initial values yet");
  }
  if (consistency_.per_arrival()) {
    if (step != s.worker_steps[worker]) {
      return FailedPrecondition("gradient of chunk " + std::to_string(chunk) + " for step " +
                                std::to_string(step) + " of worker " + std::to_string(worker) +
                                ", but its next step here is " +
                                std::to_string(s.worker_steps[worker]));
    }
    if (s.kind == TensorKind::kBufferAverage) {
      return FailedPrecondition("buffers='average' has no per-arrival rule under " +
                                consistency_.Name() +
                                ": use buffers='broadcast' (the lowest live rank's values) or "
                                "'local', or --consistency bsp");
    }
  } else if (step != s.version) {
    return FailedPrecondition("gradient of chunk " + std::to_string(chunk) + " for step " +
                              std::to_string(step) + ", but the chunk is at step " +
                              std::to_string(s.version));
  }
  if (IsBuffer(s.kind) && type != WireType::kF32) {
    return InvalidArgument("buffer chunk " + std::to_string(chunk) + " came as " +
                           WireTypeName(type) + "; buffers travel as f32");
  }
  if (grad.size() != ContributionBytes(chunk, type)) {
    return InvalidArgument("step contribution to chunk " + std::to_string(chunk) + " (" +
                           TensorKindName(s.kind) + "): " + std::to_string(grad.size()) +
                           " bytes, expected " + std::to_string(ContributionBytes(chunk, type)) +
                           " of " + WireTypeName(type));
  }
  if (s.kind == TensorKind::kFrozen) grad = transport::Frame::Borrow(&kNoChange, 0, nullptr);
  if (s.awaiting_clip || s.contributions[worker].data() != nullptr) {
    return FailedPrecondition("duplicate gradient from worker " + std::to_string(worker) +
                              " for chunk " + std::to_string(chunk) + " step " +
                              std::to_string(step));
  }
  if (!live_[worker]) {
    return FailedPrecondition("worker " + std::to_string(worker) +
                              " is no longer part of the job (it was declared lost)");
  }
  if (step < join_step_[worker]) {
    return FailedPrecondition("worker " + std::to_string(worker) + " joined at step " +
                              std::to_string(join_step_[worker]) + "; step " +
                              std::to_string(step) + " completes without it");
  }
  bool first = true;
  for (const auto& f : s.contributions) first &= f.data() == nullptr;
  if (s.kind == TensorKind::kParameter && !first && lr != s.step_lr) {
    auto name = [](double x) {
      return x >= 0 ? std::to_string(x) : std::string("the configured one");
    };
    return FailedPrecondition("worker " + std::to_string(worker) + " asks learning rate " +
                              name(lr) + " for step " + std::to_string(step) + ", worker " +
                              std::to_string(s.step_lr_from) + " asked " + name(s.step_lr) +
                              ": every worker must call set_learning_rate() with the same value "
                              "at the same step");
  }
  if (first) {
    s.first_contribution = std::chrono::steady_clock::now();
    s.step_lr = lr;
    s.step_lr_from = worker;
  }
  s.contributions[worker] = std::move(grad);
  s.contribution_types[worker] = type;
  parked_[worker] = false;  // it steps again
  return Complete(s);
}

bool ChunkStore::Complete(const Slot& s) const {
  if (s.awaiting_clip) return false;                           // complete and aggregated already
  if (consistency_.per_arrival()) return ArrivedFrom(s) >= 0;  // each gradient a step of its own
  bool any = false;
  for (int w = 0; w < num_workers_; ++w) {
    const bool in = s.contributions[w].data() != nullptr;
    if (live_[w] && s.version >= join_step_[w] && !in) return false;
    any |= in;
  }
  return any;
}

std::vector<uint32_t> ChunkStore::RemoveWorker(int worker) {
  std::vector<uint32_t> completed;
  if (!IsLive(worker)) return completed;
  live_[worker] = false;
  for (uint32_t c = 0; c < slot_of_.size(); ++c) {
    if (slot_of_[c] < 0) continue;
    Slot& s = slots_[slot_of_[c]];
    if (s.initialized && Complete(s)) completed.push_back(c);
  }
  return ApplySteps(completed);
}

std::optional<uint64_t> ChunkStore::FirstStepMissing(int worker) const {
  std::optional<uint64_t> first;
  if (!IsLive(worker)) return first;
  for (uint32_t c = 0; c < slot_of_.size(); ++c) {
    if (slot_of_[c] < 0) continue;
    const Slot& s = slots_[slot_of_[c]];
    if (!s.primary || !s.initialized) continue;
    // ssp/async: its own next step there (each gradient is applied as it comes).
    const uint64_t missing = consistency_.per_arrival()
                                 ? s.worker_steps[worker]
                                 : s.version + (HasContribution(c, worker) ? 1 : 0);
    first = first ? std::min(*first, missing) : missing;
  }
  return first;
}

Status ChunkStore::AddWorker(int worker, uint64_t step) {
  if (worker < 0) return InvalidArgument("worker rank " + std::to_string(worker) + " out of range");
  for (const Slot& s : slots_) {
    if (!consistency_.per_arrival() && s.primary && s.version > step) {
      return FailedPrecondition("worker " + std::to_string(worker) + " cannot join at step " +
                                std::to_string(step) + ": a chunk is at step " +
                                std::to_string(s.version) + " already");
    }
  }
  if (worker >= num_workers_) {  // a new rank: every step before `step` had no place for it
    num_workers_ = worker + 1;
    live_.resize(num_workers_, false);
    parked_.resize(num_workers_, false);
    join_step_.resize(num_workers_, 0);
    for (Slot& s : slots_) {
      s.contributions.resize(num_workers_);
      s.contribution_types.resize(num_workers_, WireType::kF32);
      s.worker_steps.resize(num_workers_, 0);
      s.applied_at.resize(num_workers_, 0);
    }
  }
  live_[worker] = true;
  join_step_[worker] = step;
  if (consistency_.per_arrival()) {
    for (Slot& s : slots_) {
      s.worker_steps[worker] = step;
      s.applied_at[worker] = 0;
    }
  }
  return Status::Ok();
}

std::optional<ChunkStore::Stall> ChunkStore::OldestStall() const {
  std::optional<Stall> oldest;
  for (uint32_t c = 0; c < slot_of_.size(); ++c) {
    if (slot_of_[c] < 0) continue;
    const Slot& s = SlotOf(c);
    bool any = false;
    for (const auto& f : s.contributions) any |= f.data() != nullptr;
    if (!s.primary || !any || (oldest && oldest->since <= s.first_contribution)) continue;
    Stall stall{c, s.version, s.first_contribution, {}};
    for (int w = 0; w < num_workers_; ++w) {
      if (live_[w] && s.version >= join_step_[w] && s.contributions[w].data() == nullptr) {
        stall.missing.push_back(w);
      }
    }
    oldest = std::move(stall);
  }
  return oldest;
}

void ChunkStore::SetConsistency(const Consistency& c) {
  consistency_ = c;
  if (!adam_ || !c.per_arrival()) return;
  // The same state slots (zeros before any step): only beta1 changes. A
  // backup made with the same worker count applies the same. (A PS made
  // after an elastic job grew takes its larger count: its values stay
  // close, and nothing is reproducible under ssp/async anyway.)
  OptimizerConfig config = optimizer_config_;
  config.beta1 = PerArrivalBeta1(config.beta1, job_workers_);
  if (auto adjusted = Optimizer::Create(config); adjusted.ok()) optimizer_ = std::move(*adjusted);
}

std::string ChunkStore::PerArrivalRule() const {
  if (!adam_) return "learning rate / live workers";
  return fmt::format(
      "learning rate / sqrt(live workers), beta1 {:g} for {} workers (less the momentum of the "
      "asynchrony)",
      PerArrivalBeta1(optimizer_config_.beta1, job_workers_), job_workers_);
}

int ChunkStore::ArrivedFrom(const Slot& s) const {
  for (size_t w = 0; w < s.contributions.size(); ++w) {
    if (s.contributions[w].data() != nullptr) return static_cast<int>(w);
  }
  return -1;
}

int ChunkStore::LowestLive() const {
  for (int w = 0; w < num_workers_; ++w) {
    if (live_[w]) return w;
  }
  return -1;
}

int ChunkStore::LiveCount() const {
  int n = 0;
  for (int w = 0; w < num_workers_; ++w) n += live_[w] ? 1 : 0;
  return n;
}

std::vector<int> ChunkStore::LiveWorkers() const {
  std::vector<int> out;
  for (int w = 0; w < num_workers_; ++w) {
    if (live_[w]) out.push_back(w);
  }
  return out;
}

std::vector<bool> ChunkStore::Run(std::vector<StepInputs>& inputs,
                                  const std::vector<uint32_t>& chunks) {
  // Work items of at most kPiece elements, so one large chunk spreads over
  // every apply thread too.
  constexpr size_t kPiece = 1 << 16;
  struct Piece {
    size_t input, begin, end;
  };
  std::vector<Piece> pieces;
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (inputs[k].grads.empty()) continue;  // frozen: only the version moves on
    const uint32_t n = Numel(chunks[k]);
    for (size_t b = 0; b < n; b += kPiece)
      pieces.push_back({k, b, std::min<size_t>(n, b + kPiece)});
  }
  if (nonfinite_flags_size_ < chunks.size()) {
    nonfinite_flags_.reset(new std::atomic<bool>[chunks.size()]);
    nonfinite_flags_size_ = chunks.size();
  }
  std::atomic<bool>* nonfinite = nonfinite_flags_.get();
  for (size_t k = 0; k < chunks.size(); ++k) {
    nonfinite[k] = false;
    if (check_nonfinite_ && Kind(chunks[k]) == TensorKind::kParameter) {
      inputs[k].nonfinite = &nonfinite[k];
    }
  }
  auto run = [&](size_t i) { StepRange(inputs[pieces[i].input], pieces[i].begin, pieces[i].end); };
  if (pool_) {
    pool_->ParallelFor(pieces.size(), run);
  } else {
    for (size_t i = 0; i < pieces.size(); ++i) run(i);
  }
  std::vector<bool> found(chunks.size(), false);
  for (size_t k = 0; k < chunks.size(); ++k) {
    found[k] = nonfinite[k].load();
    if (found[k] && nonfinite_.empty()) nonfinite_ = DescribeNonFinite(chunks[k]);
  }
  return found;
}

std::string ChunkStore::DescribeNonFinite(uint32_t chunk) const {
  const Slot& s = slots_[slot_of_[chunk]];
  const Chunk& where = map_.chunks()[chunk];
  const std::string tensor = map_.tensors()[where.tensor].name;
  const uint32_t n = Numel(chunk);
  const int arrived = consistency_.per_arrival() ? ArrivedFrom(s) : -1;
  for (size_t w = 0; w < s.contributions.size(); ++w) {
    if (s.contributions[w].data() == nullptr || (arrived >= 0 && static_cast<int>(w) != arrived))
      continue;
    const size_t bad = FirstNonFinite(s.contribution_types[w], s.contributions[w].data(), n);
    if (bad == n) continue;
    const uint64_t step = arrived >= 0 ? s.worker_steps[w] : s.version;
    return "worker " + std::to_string(w) + "'s gradient of step " + std::to_string(step) +
           " for tensor '" + tensor + "' (element " + std::to_string(where.offset + bad) +
           ") is NaN or infinite: not applied, and the job ends (a NaN or infinite loss? "
           "torch's GradScaler skips such steps; clip the gradients or lower the learning "
           "rate)";
  }
  return "the mean gradient of step " + std::to_string(s.version) + " for tensor '" + tensor +
         "' overflows to infinity (every worker's gradient is finite, their sum is not): not "
         "applied, and the job ends (clip the gradients or lower the learning rate)";
}

void ChunkStore::TakeContributions(const Slot& s, StepInputs* in) {
  if (consistency_.per_arrival()) {  // one gradient, as it came (the lr is divided)
    const int w = ArrivedFrom(s);
    if (w < 0) return;
    const int lowest = LowestLive();
    if (s.kind == TensorKind::kBufferBroadcast && lowest >= 0 && w != lowest) return;  // counted
    in->divisor = 1;
    in->grads.push_back(s.contributions[w].data());
    in->types.push_back(s.contribution_types[w]);
    // ssp with --dynamic-slicing: the mean over its worker's share of the
    // batch of that worker's step.
    if (s.kind == TensorKind::kParameter) {
      if (const float weight = batch_shares_.WeightOf(s.worker_steps[w] + 1, w); weight != 1.0f) {
        in->weights = {weight};
      }
    }
    return;
  }
  std::vector<int> from;
  for (size_t w = 0; w < s.contributions.size();
       ++w) {  // rank order: the result does not depend on arrival
    if (s.contributions[w].data() == nullptr) continue;
    in->grads.push_back(s.contributions[w].data());
    in->types.push_back(s.contribution_types[w]);
    from.push_back(static_cast<int>(w));
    if (s.kind == TensorKind::kBufferBroadcast) break;  // the lowest live rank's values
  }
  in->divisor = static_cast<float>(in->grads.size());
  // A gradient is the mean over its worker's share of the batch.
  if (s.kind == TensorKind::kParameter) in->weights = batch_shares_.Weights(s.version + 1, from);
}

void ChunkStore::Advance(Slot& s, const StepInputs& in) {
  if (const int w = consistency_.per_arrival() ? ArrivedFrom(s) : -1; w >= 0) {
    s.last_worker = w;
    s.last_worker_step = s.worker_steps[w];
    s.worker_steps[w]++;
    s.applied_at[w] = s.version + 1;
  }
  for (auto& f : s.contributions) f = transport::Frame();
  s.version++;
  s.applied_lr = in.lr;
  s.step_lr = -1;
  s.step_lr_from = -1;
  if (in.optimizer) s.wire_fresh = in.wire_out != nullptr;  // the values changed
}

std::vector<uint32_t> ChunkStore::ApplySteps(const std::vector<uint32_t>& chunks) {
  if (clipping()) {
    Aggregate(chunks);
    std::vector<uint32_t> known;  // completed a step whose total norm came already
    for (uint32_t c : chunks) {
      if (SlotOf(c).version == known_norm_step_) known.push_back(c);
    }
    return ApplyHeld(known);
  }
  std::vector<StepInputs> inputs(chunks.size());
  for (size_t k = 0; k < chunks.size(); ++k) {
    Slot& s = slots_[slot_of_[chunks[k]]];
    const uint32_t n = Numel(chunks[k]);
    StepInputs& in = inputs[k];
    if (s.kind == TensorKind::kFrozen) continue;  // only the version moves on
    TakeContributions(s, &in);
    if (IsBuffer(s.kind)) {  // the new values: into the mean buffer, copied over below
      in.mean_out = MeanBuffer(s, n);
      // Only counted (ssp/async, not the lowest live rank's): the values stay.
      if (in.grads.empty()) std::memcpy(in.mean_out, s.values, size_t{n} * sizeof(float));
      continue;
    }
    // The mean is kept when it is pulled (sum mode) or sent to the backup.
    if (!optimizer_ || map_.replicated()) in.mean_out = MeanBuffer(s, n);
    in.optimizer = optimizer_.get();
    in.values = s.values;
    in.state = s.state;
    in.step = s.version + 1;
    if (optimizer_) in.lr = s.step_lr >= 0 ? s.step_lr : optimizer_->configured_lr();
    // ssp/async: each gradient is 1/N of a step (N live workers): lr / N;
    // Adam's by the square-root rule, lr / sqrt(N) (see common/consistency.h).
    if (consistency_.per_arrival()) {
      const double n = static_cast<double>(std::max(1, LiveCount()));
      in.lr /= adam_ ? std::sqrt(n) : n;
    }
    // Values a bf16/fp16 wire pulled before are converted while in cache.
    if (optimizer_ && s.wire_type != WireType::kF32) {
      in.wire_type = s.wire_type;
      in.wire_out = WireBuffer(s, n);
    }
  }
  const std::vector<bool> nonfinite = Run(inputs, chunks);
  std::vector<uint32_t> applied;
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (nonfinite[k]) continue;  // not applied: the step stays unpublished (nonfinite())
    Slot& s = slots_[slot_of_[chunks[k]]];
    if (IsBuffer(s.kind)) {
      std::memcpy(s.values, inputs[k].mean_out, size_t{Numel(chunks[k])} * sizeof(float));
    }
    Advance(s, inputs[k]);
    applied.push_back(chunks[k]);
  }
  return applied;
}

void ChunkStore::Aggregate(const std::vector<uint32_t>& chunks) {
  std::vector<StepInputs> inputs(chunks.size());
  for (size_t k = 0; k < chunks.size(); ++k) {
    Slot& s = slots_[slot_of_[chunks[k]]];
    StepInputs& in = inputs[k];
    if (s.kind == TensorKind::kFrozen) continue;
    TakeContributions(s, &in);
    in.mean_out = MeanBuffer(s, Numel(chunks[k]));  // no optimizer: the mean only
  }
  const std::vector<bool> nonfinite = Run(inputs, chunks);
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (nonfinite[k]) continue;  // held as it is: its norm never comes (nonfinite())
    Slot& s = slots_[slot_of_[chunks[k]]];
    for (auto& f : s.contributions) f = transport::Frame();
    s.awaiting_clip = true;
    s.sum_squares = 0;
    if (s.kind != TensorKind::kParameter) continue;
    const float* m = inputs[k].mean_out;
    double sum = 0;
    for (uint32_t i = 0, n = Numel(chunks[k]); i < n; ++i) sum += double(m[i]) * m[i];
    s.sum_squares = sum;
  }
}

ChunkStore::NormShare ChunkStore::NormOf(uint64_t step) const {
  NormShare share;
  bool waiting = false;
  for (uint32_t c = 0; c < slot_of_.size(); ++c) {
    if (!Owns(c)) continue;
    const Slot& s = SlotOf(c);
    if (s.version == step + 1) {
      if (!s.norm_known) return {NormShare::State::kGone};
      return {NormShare::State::kApplied, s.applied_norm};
    }
    if (s.version > step + 1) return {NormShare::State::kGone};
    if (s.version < step || !s.awaiting_clip) {
      waiting = true;
    } else if (s.kind == TensorKind::kParameter) {
      share.chunks.push_back(c);
      share.sum_squares.push_back(s.sum_squares);
    }
  }
  if (waiting) return {};
  share.state = NormShare::State::kPartial;
  return share;
}

std::vector<uint32_t> ChunkStore::ApplyClipped(uint64_t step, double total_norm) {
  known_norm_step_ = step;
  known_norm_ = total_norm;
  std::vector<uint32_t> held;
  for (uint32_t c = 0; c < slot_of_.size(); ++c) {
    if (Owns(c) && SlotOf(c).awaiting_clip && SlotOf(c).version == step) held.push_back(c);
  }
  return ApplyHeld(held);
}

std::vector<uint32_t> ChunkStore::ApplyHeld(const std::vector<uint32_t>& chunks) {
  // torch::nn::utils::clip_grad_norm_: coefficient max / (norm + 1e-6),
  // applied only when below 1.
  const double coefficient = max_norm_ / (known_norm_ + 1e-6);
  const bool scale = coefficient < 1;
  const float factor = static_cast<float>(coefficient);
  std::vector<StepInputs> inputs(chunks.size());
  for (size_t k = 0; k < chunks.size(); ++k) {
    Slot& s = slots_[slot_of_[chunks[k]]];
    const uint32_t n = Numel(chunks[k]);
    if (s.kind != TensorKind::kParameter) continue;  // buffers: copied below; frozen: nothing
    float* mean = s.mean->data();
    if (scale) {
      for (uint32_t i = 0; i < n; ++i) mean[i] *= factor;  // what the backup gets too
    }
    StepInputs& in = inputs[k];
    in.grads = {mean};
    in.types = {WireType::kF32};
    in.optimizer = optimizer_.get();
    in.values = s.values;
    in.state = s.state;
    in.step = s.version + 1;
    in.lr = s.step_lr >= 0 ? s.step_lr : optimizer_->configured_lr();
    if (s.wire_type != WireType::kF32) {
      in.wire_type = s.wire_type;
      in.wire_out = WireBuffer(s, n);
    }
  }
  Run(inputs, chunks);
  for (size_t k = 0; k < chunks.size(); ++k) {
    Slot& s = slots_[slot_of_[chunks[k]]];
    if (IsBuffer(s.kind))
      std::memcpy(s.values, s.mean->data(), size_t{Numel(chunks[k])} * sizeof(float));
    s.awaiting_clip = false;
    s.applied_norm = known_norm_;
    s.norm_known = true;
    Advance(s, inputs[k]);
  }
  return chunks;
}

uint64_t ChunkStore::MinVersion() const {
  uint64_t v = UINT64_MAX;
  for (const Slot& s : slots_) v = std::min(v, s.version);
  return slots_.empty() ? 0 : v;
}

uint64_t ChunkStore::SlowestSteps(uint32_t chunk) const {
  const Slot& s = SlotOf(chunk);
  uint64_t slowest = UINT64_MAX;
  for (int w = 0; w < num_workers_; ++w) {
    if (live_[w] && !parked_[w]) slowest = std::min(slowest, s.worker_steps[w]);
  }
  return slowest;
}

uint64_t ChunkStore::NewestWorkerStep() const {
  uint64_t newest = 0;
  for (const Slot& s : slots_) {
    for (uint64_t n : s.worker_steps) newest = std::max(newest, n);
  }
  return newest;
}

Result<bool> ChunkStore::IsRepeat(uint32_t chunk, int worker, uint64_t step) const {
  const Slot& s = SlotOf(chunk);
  if (consistency_.per_arrival()) {
    if (step > s.worker_steps[worker]) {
      return FailedPrecondition("push of worker " + std::to_string(worker) + " for step " +
                                std::to_string(step) + " but chunk " + std::to_string(chunk) +
                                " has applied its steps up to " +
                                std::to_string(s.worker_steps[worker]));
    }
    return step < s.worker_steps[worker];
  }
  if (step > s.version) {
    return FailedPrecondition("push for step " + std::to_string(step) + " but chunk " +
                              std::to_string(chunk) + " is at step " + std::to_string(s.version));
  }
  return step < s.version || HasContribution(chunk, worker);
}

uint64_t ChunkStore::CompletedStep() const {
  if (!consistency_.per_arrival()) return MinVersion();
  uint64_t completed = UINT64_MAX;
  for (const Slot& s : slots_) {
    for (int w = 0; w < num_workers_; ++w) {
      if (live_[w]) completed = std::min(completed, s.worker_steps[w]);
    }
  }
  // No live worker (every one finished): what the chunks reached.
  if (completed == UINT64_MAX) return NewestWorkerStep();
  return completed;
}

uint64_t ChunkStore::MaxVersion() const {
  uint64_t v = 0;
  for (const Slot& s : slots_) v = std::max(v, s.version);
  return v;
}

std::vector<ChunkImage> ChunkStore::Capture() const {
  std::vector<ChunkImage> images;
  images.reserve(slots_.size());
  for (uint32_t c = 0; c < slot_of_.size(); ++c) {
    if (slot_of_[c] >= 0) images.push_back(CaptureChunk(c));
  }
  return images;
}

ChunkImage ChunkStore::CaptureChunk(uint32_t c) const {
  const Slot& s = SlotOf(c);
  const uint32_t n = Numel(c);
  ChunkImage image{c, s.version, std::vector<float>(ImageFloats(c)), {}};
  if (consistency_.per_arrival()) image.worker_steps = s.worker_steps;
  std::memcpy(image.data.data(), s.values, n * sizeof(float));
  for (size_t k = 0; k < s.state.size(); ++k) {
    std::memcpy(image.data.data() + (k + 1) * n, s.state[k], n * sizeof(float));
  }
  return image;
}

Status ChunkStore::LoadImage(const ChunkImage& image) {
  if (!Holds(image.chunk)) {
    return DataLoss("chunk " + std::to_string(image.chunk) +
                    " is not held by this PS (was the snapshot taken with another --ps count "
                    "or model?)");
  }
  Slot& s = slots_[slot_of_[image.chunk]];
  const uint32_t n = Numel(image.chunk);
  if (image.data.size() != ImageFloats(image.chunk)) {
    return DataLoss("chunk " + std::to_string(image.chunk) + " " +
                    WrongSize(image.data.size(), n, s.state.size()));
  }
  std::memcpy(s.values, image.data.data(), n * sizeof(float));
  for (size_t k = 0; k < s.state.size(); ++k) {
    std::memcpy(s.state[k], image.data.data() + (k + 1) * n, n * sizeof(float));
  }
  s.version = image.version;
  if (consistency_.per_arrival() && image.worker_steps.empty()) {
    // A bsp snapshot (or image): its version is every worker's step.
    for (int w = 0; w < num_workers_; ++w) {
      s.worker_steps[w] = image.version;
      s.applied_at[w] = image.version;
    }
  } else if (consistency_.per_arrival()) {
    // (Workers past this job's count, from a snapshot of a larger job, are
    // not in it: their steps stay in the values.)
    const size_t counted = std::min(image.worker_steps.size(), size_t(num_workers_));
    for (size_t w = 0; w < counted; ++w) {
      s.worker_steps[w] = image.worker_steps[w];
      s.applied_at[w] = image.version;  // confirmed with the image
    }
  }
  s.initialized = true;
  s.wire_fresh = false;
  for (auto& f : s.contributions) f = transport::Frame();
  s.awaiting_clip = false;
  s.norm_known = false;
  return Status::Ok();
}

Status ChunkStore::Restore(const std::vector<ChunkImage>& images, uint64_t step) {
  std::vector<bool> seen(slots_.size(), false);
  for (const ChunkImage& image : images) {
    if (!Holds(image.chunk)) {
      return DataLoss("the snapshot holds chunk " + std::to_string(image.chunk) +
                      ", which this PS does not (was it taken with another --ps count or model?)");
    }
    const Slot& s = SlotOf(image.chunk);
    if (image.data.size() != size_t{Numel(image.chunk)} * (1 + s.state.size())) {
      return DataLoss("the snapshot's chunk " + std::to_string(image.chunk) + " " +
                      WrongSize(image.data.size(), Numel(image.chunk), s.state.size()) +
                      "; resume with the model and optimizer the run was started with, or train "
                      "from scratch (without --resume, with another --snapshot-dir)");
    }
    if (!consistency_.per_arrival() && !image.worker_steps.empty()) {
      return DataLoss(
          "the snapshot was taken under --consistency ssp:K or async (each worker at its own "
          "step); resume it under ssp:K or async too");
    }
    seen[slot_of_[image.chunk]] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) return DataLoss("the snapshot lacks chunks this PS holds");
  }
  for (const ChunkImage& image : images) {
    EEN_RETURN_IF_ERROR(LoadImage(image));
    if (!consistency_.per_arrival()) continue;
    // Every worker takes up at `step` or later: one the snapshot's job did
    // not have, or had lost by then, at `step`.
    Slot& s = slots_[slot_of_[image.chunk]];
    for (int w = 0; w < num_workers_; ++w) s.worker_steps[w] = std::max(s.worker_steps[w], step);
  }
  known_norm_step_ = UINT64_MAX;  // the steps after the snapshot run again
  return Status::Ok();
}

transport::Frame ChunkStore::Values(uint32_t chunk) const {
  const Slot& s = SlotOf(chunk);
  return transport::Frame::Borrow(s.values, Numel(chunk) * sizeof(float),
                                  std::shared_ptr<const void>(s.arena, s.values));
}

uint16_t* ChunkStore::WireBuffer(Slot& s, uint32_t n) {
  if (!s.wire || s.wire.use_count() > 1 || s.wire->size() != n) {
    s.wire = std::make_shared<std::vector<uint16_t>>(n);
    s.wire_fresh = false;
  }
  return s.wire->data();
}

transport::Frame ChunkStore::WireValues(uint32_t chunk, WireType type) {
  if (type == WireType::kF32) return Values(chunk);
  Slot& s = slots_[slot_of_[chunk]];
  const uint32_t n = Numel(chunk);
  if (!s.wire_fresh || s.wire_type != type) {
    EncodeWire(type, s.values, WireBuffer(s, n), n);
    s.wire_type = type;
    s.wire_fresh = true;
  }
  return transport::Frame::Borrow(s.wire->data(), size_t{n} * 2, s.wire);
}

transport::Frame ChunkStore::WireMeanGradient(uint32_t chunk, WireType type) const {
  transport::Frame mean = MeanGradient(chunk);
  if (type == WireType::kF32 || mean.data() == nullptr) return mean;
  const size_t n = mean.size() / sizeof(float);
  auto out = std::make_shared<std::vector<uint16_t>>(n);
  EncodeWire(type, reinterpret_cast<const float*>(mean.data()), out->data(), n);
  return transport::Frame::Borrow(out->data(), n * 2, out);
}

transport::Frame ChunkStore::MeanGradient(uint32_t chunk) const {
  const Slot& s = SlotOf(chunk);
  if (!s.mean) return transport::Frame();
  return transport::Frame::Borrow(s.mean->data(), s.mean->size() * sizeof(float), s.mean);
}

}  // namespace een::ps
