// The LibTorch integration (with worker/local_optimizer, the only worker
// files that include torch).
#include "een/data_parallel.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

#include "common/logging.h"
#include "common/optimizer_wire.h"
#include "common/transport/auth.h"
#include "worker/bucket_layout.h"
#include "worker/data_parallel_impl.h"
#include "worker/device/device_copies.h"
#include "worker/device/fake_device_copies.h"
#include "worker/device/gradient_stager.h"
#include "worker/device/host_pinning.h"
#include "worker/local_optimizer.h"
#include "worker/public_error.h"
#include "worker/timeline.h"
#include "worker/worker_client.h"

namespace een {

namespace {

// One DataParallel per process in a job (a second would join as the same rank).
std::atomic<bool> g_joined{false};

}  // namespace

void ThrowIfError(const Status& s, const std::string& where) {
  if (!s.ok()) throw Error("een: " + where + ": " + s.message(), PublicCode(s.code()));
}

JoinedSlot::~JoinedSlot() {
  if (held) g_joined = false;
}

DataParallel::Impl::Impl(torch::nn::Module& module, DataParallelOptions options)
    : raise_rolled_back_(options.raise_rolled_back) {
  Result<bool> local = LocalModeRequested();
  ThrowIfError(local.status(), "local mode");
  if (*local) {
    if (std::getenv("EEN_COORDINATOR")) {
      throw Error(
          "een: EEN_LOCAL=1, but this process is part of a job (EEN_COORDINATOR is "
          "set, een-launch started it): unset EEN_LOCAL to train in the job");
    }
    if (spdlog::get("een:worker 0 (local)") == nullptr) {
      ThrowIfError(InitLogging("worker 0 (local)"), "local mode");
    }
    ThrowIfError(ValidateOptimizer(options.optimizer), "bad optimizer");
    optimizer_ = options.optimizer;
    Register(module, options.buffers);  // the job's checks, though nothing travels
    std::vector<torch::Tensor> trainable;
    for (const Registered& r : tensors_) {
      if (r.kind == TensorKind::kParameter) trainable.push_back(r.tensor);
    }
    local_ = std::make_unique<LocalOptimizer>(trainable, optimizer_);
    local_grads_.resize(tensors_.size());
    arrived_.assign(tensors_.size(), false);
    HookGradients();
    NoteParameterVersions();
    spdlog::warn(
        "EEN_LOCAL=1: training in this process alone (rank 0 of 1, no parameter "
        "servers), {} optimizer{} applied here as the PS would; for debugging",
        OptimizerName(optimizer_.kind), optimizer_.clip_grad_norm > 0 ? " with clipping" : "");
    return;
  }
  auto env = JobEnvironment::FromProcess("this program");
  ThrowIfError(env.status(), "cannot join a job");
  if (g_joined.exchange(true)) {
    throw Error(
        "een: a DataParallel already exists in this process: a worker process trains one model "
        "through one DataParallel (Finish() and destroy it before making another)",
        Error::Code::kFailedPrecondition);
  }
  joined_.held = true;
  if (spdlog::get("een:worker " + std::to_string(env->rank)) == nullptr) {
    ThrowIfError(InitLogging("worker " + std::to_string(env->rank)), "cannot join a job");
  }
  ThrowIfError(AuthenticateAs(transport::WorkerIdentity(env->rank), "this program"),
               "cannot join a job");
  if (env->bucket_bytes > 0) options.bucket_bytes = env->bucket_bytes;
  if (options.bucket_bytes == 0) throw Error("een: bucket_bytes must be positive");
  if (env->rank == 0) trace_path_ = env->trace_record;
  if (!env->timeline.empty()) {
    timeline_ = std::make_unique<Timeline>(
        env->timeline + ".worker-" + std::to_string(env->rank) + ".json", env->rank, 50);
  }
  Register(module, options.buffers);
  std::vector<TensorInfo> tensors;
  for (const Registered& r : tensors_) {
    tensors.push_back(
        {r.name, static_cast<uint64_t>(r.tensor.numel()), r.kind, r.tensor.sizes().vec()});
  }
  auto joined = WorkerClient::Join(*env, tensors, options.optimizer);
  ThrowIfError(joined.status(), "cannot join the job at " + env->coordinator);
  client_ = std::move(joined).value();
  optimizer_ = client_->optimizer();
  BuildBuckets(options.bucket_bytes);
  if (device_ || fake_device_) SetUpDevicePath();

  // Every worker starts from rank 0's values, or from the snapshot.
  step_ = client_->start_step();
  if (client_->sends_initial_values()) PushInitialValues();
  JoinPull();
  HookGradients();
  NoteParameterVersions();
  size_t counts[4] = {0, 0, 0, 0};
  for (const Registered& r : tensors_) counts[static_cast<int>(r.kind)]++;
  spdlog::info(
      "joined as worker {} of {}: {} parameter tensors, {} frozen, {} buffers ({}), "
      "{} buckets, optimizer on {}{}",
      client_->rank(), client_->world_size(), counts[0], counts[3], counts[1] + counts[2],
      options.buffers == BufferSync::kBroadcast ? "rank 0's each step"
      : options.buffers == BufferSync::kAverage ? "averaged each step"
                                                : "kept local",
      buckets_.size(), client_->sum_mode() ? "this worker (sum mode)" : "the parameter servers",
      client_->resumed() ? ", resuming at step " + std::to_string(step_) : "");
}

void DataParallel::Impl::HookGradients() {
  pushed_grads_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].kind != TensorKind::kParameter) continue;
    auto accumulator = torch::autograd::impl::grad_accumulator(tensors_[i].tensor);
    if (!accumulator) throw Error("een: parameter '" + tensors_[i].name + "' is not a leaf tensor");
    const uintptr_t key =
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, i](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list&) {
              OnGradient(i);
              return outputs;
            }));
    accumulators_.emplace_back(std::move(accumulator), key);
  }
}

bool DataParallel::Impl::AccumulatorsReplaced() const {
  size_t k = 0;
  for (const Registered& r : tensors_) {
    if (r.kind != TensorKind::kParameter) continue;
    if (k >= accumulators_.size() ||
        torch::autograd::impl::grad_accumulator(r.tensor) != accumulators_[k].first) {
      return true;
    }
    ++k;
  }
  return false;
}

void DataParallel::Impl::RehookIfReplaced() {
  if (!AccumulatorsReplaced()) return;
  for (auto& [accumulator, key] : accumulators_) accumulator->del_post_hook(key);
  accumulators_.clear();
  HookGradients();
}

DataParallel::Impl::~Impl() {
  for (auto& [accumulator, key] : accumulators_) accumulator->del_post_hook(key);
  stager_.reset();  // waits for the copies in flight
  if (copies_) copies_->WaitToDevice();
  copies_.reset();
  for (void* p : pinned_) UnpinHostMemory(p);
}

void DataParallel::Impl::Register(torch::nn::Module& module, BufferSync buffers) {
  std::optional<std::pair<std::string, c10::Device>> first;  // the first parameter's device
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (p.numel() == 0) continue;  // nothing to keep in step
    const bool half = p.scalar_type() == torch::kHalf || p.scalar_type() == torch::kBFloat16;
    if (!p.is_sparse() && !p.is_contiguous()) {
      throw Error("een: parameter '" + item.key() +
                  "' is not contiguous (a transposed or sliced view?): make it so before "
                  "creating DataParallel (param.data = param.data.contiguous())");
    }
    if (!(p.scalar_type() == torch::kFloat || (half && !p.is_cpu())) || p.is_sparse()) {
      throw Error("een: parameter '" + item.key() +
                  "' must be a dense contiguous tensor: float32 on the CPU, or float32, bfloat16 "
                  "or float16 on a GPU (got " +
                  std::string(c10::toString(p.scalar_type())) + " on " + p.device().str() + ")");
    }
    if (!first) {
      first.emplace(item.key(), p.device());
      if (!p.is_cpu()) device_ = p.device();
    } else if (first->second != p.device()) {
      throw Error("een: parameters on two devices ('" + first->first + "' on " +
                  first->second.str() + ", '" + item.key() + "' on " + p.device().str() +
                  "): a worker trains on one device; move the whole module there first "
                  "(module->to(device))");
    }
    tensors_.push_back(
        {p, item.key(), p.requires_grad() ? TensorKind::kParameter : TensorKind::kFrozen});
  }
  if (buffers != BufferSync::kLocal) {
    const TensorKind kind = buffers == BufferSync::kBroadcast ? TensorKind::kBufferBroadcast
                                                              : TensorKind::kBufferAverage;
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      const torch::Tensor& b = item.value();
      if (!b.defined() || b.numel() == 0) continue;
      if (b.is_sparse() || b.is_complex() || b.scalar_type() == torch::kBool) {
        throw Error("een: buffer '" + item.key() + "' (" +
                    std::string(c10::toString(b.scalar_type())) + " on " + b.device().str() +
                    ") cannot be kept in step: buffers must be real-valued tensors; keep "
                    "this module's buffers local with DataParallelOptions::buffers = "
                    "BufferSync::kLocal");
      }
      tensors_.push_back({b, item.key(), kind, staging_numel_});
      staging_numel_ += static_cast<size_t>(b.numel());
    }
  }
  bool trainable = false;
  for (const Registered& r : tensors_) trainable |= r.kind == TensorKind::kParameter;
  if (!trainable) throw Error("een: the module has no trainable parameters");
  if (const char* fake = std::getenv("EEN_FAKE_DEVICE_COPIES"); fake && *fake) {
    if (std::string(fake) != "0" && std::string(fake) != "1") {
      throw Error("een: EEN_FAKE_DEVICE_COPIES='" + std::string(fake) + "' must be 0 or 1");
    }
    fake_device_ = std::string(fake) == "1" && !device_;
  }
  push_staging_ = std::make_shared<std::vector<float>>(staging_numel_);
  pull_staging_.assign(staging_numel_, 0.0f);
}

namespace {

// A buffer's values as float32, into `out`.
void GatherBuffer(const torch::Tensor& buffer, float* out) {
  torch::NoGradGuard no_grad;
  torch::from_blob(out, {buffer.numel()}, torch::kFloat).copy_(buffer.reshape({-1}));
}

// Float32 values back into a buffer of any real dtype (integers rounded).
void ScatterBuffer(const float* in, torch::Tensor& buffer) {
  torch::NoGradGuard no_grad;
  torch::Tensor values = torch::from_blob(const_cast<float*>(in), buffer.sizes(), torch::kFloat);
  if (!torch::isFloatingType(buffer.scalar_type())) values = values.round();
  buffer.copy_(values);
}

}  // namespace

float* DataParallel::Impl::Destination(uint32_t c, bool gradients) {
  const Chunk& chunk = client_->map().chunks()[c];
  Registered& r = tensors_[chunk.tensor];
  if (IsBuffer(r.kind)) return pull_staging_.data() + r.staging + chunk.offset;
  if (!mirrors_.empty()) {  // the device path: the host mirror, copied back after the pull
    mirror_pulled_[chunk.tensor] = 1;
    return mirrors_[chunk.tensor].data_ptr<float>() + chunk.offset;
  }
  if (gradients && r.kind == TensorKind::kParameter) {
    return r.tensor.mutable_grad().data_ptr<float>() + chunk.offset;
  }
  return r.tensor.data_ptr<float>() + chunk.offset;
}

void DataParallel::Impl::PushInitialValues() {
  const ShardMap& map = client_->map();
  auto values = std::make_shared<std::vector<float>>(map.TotalNumel());
  std::vector<uint32_t> chunks;
  std::vector<const float*> data;
  std::vector<float> buffer_values;
  torch::Tensor host_values;
  size_t at = 0;
  for (uint32_t t = 0; t < tensors_.size(); ++t) {
    const Registered& r = tensors_[t];
    const float* source = nullptr;
    if (IsBuffer(r.kind)) {
      buffer_values.resize(static_cast<size_t>(r.tensor.numel()));
      GatherBuffer(r.tensor, buffer_values.data());
      source = buffer_values.data();
    } else if (!r.tensor.is_cpu()) {  // on the device: a host float32 copy first
      host_values = r.tensor.detach().to(torch::kCPU, torch::kFloat).contiguous();
      source = host_values.data_ptr<float>();
    } else {
      source = r.tensor.data_ptr<float>();
    }
    for (uint32_t c = map.FirstChunkOf(t); c < map.FirstChunkOf(t) + map.ChunkCountOf(t); ++c) {
      const Chunk& chunk = map.chunks()[c];
      std::memcpy(values->data() + at, source + chunk.offset, chunk.numel * sizeof(float));
      chunks.push_back(c);
      data.push_back(values->data() + at);
      at += chunk.numel;
    }
  }
  ThrowIfError(client_->Push(wire::PushKind::INITIAL, 0, chunks, data, values),
               "sending initial parameters");
}

void DataParallel::Impl::PushValues() {
  if (recovery_pending_) return;  // Step() recovers, then sends everything
  const ShardMap& map = client_->map();
  if (push_staging_.use_count() > 1) {  // a frame of the last push may still hold it
    push_staging_ = std::make_shared<std::vector<float>>(staging_numel_);
  }
  std::vector<uint32_t> chunks;
  std::vector<const float*> data;  // null for frozen chunks: nothing to send
  for (uint32_t t = 0; t < tensors_.size(); ++t) {
    const Registered& r = tensors_[t];
    if (r.kind == TensorKind::kParameter) continue;
    if (IsBuffer(r.kind)) GatherBuffer(r.tensor, push_staging_->data() + r.staging);
    for (uint32_t c = map.FirstChunkOf(t); c < map.FirstChunkOf(t) + map.ChunkCountOf(t); ++c) {
      chunks.push_back(c);
      data.push_back(IsBuffer(r.kind) ? push_staging_->data() + r.staging + map.chunks()[c].offset
                                      : nullptr);
    }
  }
  if (chunks.empty()) return;
  Status s = client_->Push(wire::PushKind::GRADIENT, step_, chunks, data, push_staging_);
  if (!s.ok() && client_->NeedsRecovery()) {
    recovery_pending_ = true;
    return;
  }
  ThrowIfError(s, "pushing buffers of step " + std::to_string(step_));
}

void DataParallel::Impl::StoreBuffers() {
  for (Registered& r : tensors_) {
    if (IsBuffer(r.kind)) ScatterBuffer(pull_staging_.data() + r.staging, r.tensor);
  }
}

void DataParallel::Impl::SetUpDevicePath() {
  copies_ = fake_device_ ? std::make_unique<FakeDeviceCopies>(FakeDeviceCopies::Mode::kThread)
                         : MakeDeviceCopies(*device_);
  mirrors_.resize(tensors_.size());
  mirror_pulled_.assign(tensors_.size(), 0);
  std::vector<std::pair<void*, size_t>> host;  // what the copies read and write on the host
  for (size_t b = 0; b < buckets_.size(); ++b) {
    host.emplace_back(bucket_data_[b], layout_->buckets()[b].numel * sizeof(float));
  }
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (IsBuffer(tensors_[t].kind)) continue;
    mirrors_[t] = torch::empty({tensors_[t].tensor.numel()}, torch::kFloat);
    host.emplace_back(mirrors_[t].data_ptr(), mirrors_[t].nbytes());
  }
  if (device_) {  // page-locked, so the copies are asynchronous DMA
    for (const auto& [data, bytes] : host) {
      if (bytes == 0) continue;
      if (Status s = PinHostMemory(data, bytes); !s.ok()) {
        spdlog::warn(
            "cannot pin host memory for copies to and from {} ({}): they will not "
            "overlap backward",
            device_->str(), s.message());
        break;
      }
      pinned_.push_back(data);
    }
  }
  stager_ = std::make_unique<GradientStager>(*layout_, bucket_data_, *copies_, [this](uint32_t t) {
    std::lock_guard<std::mutex> lock(mu_);
    Arrived(t);
  });
  spdlog::info("parameters on {}: gradients staged to host buckets with asynchronous copies{}",
               device_ ? device_->str() : std::string("the CPU through a fake device (tests)"),
               device_ && pinned_.empty() ? " (not pinned)" : "");
}

void DataParallel::Impl::ClearGradients() {
  for (Registered& r : tensors_) {
    if (r.kind == TensorKind::kParameter) r.tensor.mutable_grad().reset();
  }
}

void DataParallel::Impl::BeforePull() {
  if (copies_) copies_->WaitToDevice();
}

void DataParallel::Impl::StorePulled(bool gradients) {
  if (copies_) {
    for (size_t t = 0; t < tensors_.size(); ++t) {
      if (!mirror_pulled_[t]) continue;
      mirror_pulled_[t] = 0;
      Registered& r = tensors_[t];
      const bool grad = gradients && r.kind == TensorKind::kParameter;
      copies_->ToDevice(mirrors_[t].data_ptr<float>(),
                        grad ? r.tensor.mutable_grad() : r.tensor.detach());
    }
    copies_->FenceCurrentStream();
  }
  StoreBuffers();
}

void DataParallel::Impl::BuildBuckets(size_t bucket_bytes) {
  layout_ = std::make_unique<BucketLayout>(client_->map(), bucket_bytes);
  buckets_.clear();
  bucket_data_.clear();
  for (const BucketLayout::Bucket& b : layout_->buckets()) {
    auto buffer = client_->GradientBuffer(b.numel);  // shared memory on the shm transport
    ThrowIfError(buffer.status(), "allocating gradient buckets");
    buckets_.push_back({*buffer, 0});
    bucket_data_.push_back(buckets_.back().buffer.get());
  }
  ResetBuckets();
}

void DataParallel::Impl::ResetBuckets() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].pending = layout_->buckets()[b].tensors.size();
  }
  arrived_.assign(tensors_.size(), false);
  staged_.assign(tensors_.size(), 0);
}

void DataParallel::Impl::Arrived(size_t t) {
  arrived_[t] = true;
  uint32_t last = UINT32_MAX;
  for (const BucketLayout::Segment& s : layout_->segments(t)) {  // in bucket order
    if (s.bucket == last) continue;
    last = s.bucket;
    if (--buckets_[s.bucket].pending == 0) PushBucket(s.bucket);
  }
}

void DataParallel::Impl::OnGradient(size_t t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (no_sync_) return;   // accumulating: the first backward after no_sync() pushes the sum
  if (!backward_seen_) {  // the step's first gradient: the step's learning rate
    if (client_) client_->set_learning_rate(lr_);
    if (local_ && lr_ >= 0) local_->SetLearningRate(lr_);
  }
  if (!backward_seen_) backward_begin_ = std::chrono::steady_clock::now();
  backward_seen_ = true;
  if (!hook_error_.empty()) return;  // Step() says what went wrong first
  if (arrived_[t] || (t < staged_.size() && staged_[t])) {
    // Thrown by Step(): an exception from an autograd hook would reach the
    // program as the engine's error, not as een::Error.
    hook_error_ = "een: the gradient of '" + tensors_[t].name + "' arrived twice in step " +
                  std::to_string(step_) +
                  "; call Step() after each backward(), or accumulate "
                  "several backward passes inside dp.no_sync()";
    return;
  }
  if (!trace_path_.empty()) arrival_.push_back(t);
  if (timeline_) timeline_->BackwardBegins(Timeline::Clock::now());
  const torch::Tensor& grad = tensors_[t].tensor.grad();
  if (!grad.defined()) return;  // no gradient after all: counts as zero at Step()
  if (grad.is_sparse()) {
    hook_error_ = "een: sparse gradient for '" + tensors_[t].name +
                  "' is not supported: give that layer dense gradients (an Embedding with "
                  "sparse=false)";
    return;
  }
  pushed_grads_[t] = {grad.unsafeGetTensorImpl(), grad._version()};
  if (local_) {  // nothing to push: kept to check at Step() as a job would
    local_grads_[t] = grad.detach().clone();
    arrived_[t] = true;
    return;
  }
  if (stager_) {  // the device path: copied into the buckets while backward goes on
    staged_[t] = 1;
    stager_->Stage(static_cast<uint32_t>(t), grad.detach());
    return;
  }
  torch::Tensor g = grad;
  if (!g.is_cpu() || g.scalar_type() != torch::kFloat) g = g.to(torch::kCPU, torch::kFloat);
  g = g.contiguous();
  layout_->Pack(t, g.data_ptr<float>(), bucket_data_);
  Arrived(t);
}

bool DataParallel::Impl::SameAsPushed(size_t t) const {
  const torch::Tensor& g = tensors_[t].tensor.grad();
  if (!g.defined() || g.unsafeGetTensorImpl() != pushed_grads_[t].impl ||
      g._version() != pushed_grads_[t].version) {
    return false;
  }
  if (local_) {  // bitwise, as a job compares (NaN equals itself)
    const torch::Tensor now = g.cpu().contiguous(), then = local_grads_[t].cpu().contiguous();
    return now.sizes() == then.sizes() && now.scalar_type() == then.scalar_type() &&
           std::memcmp(now.data_ptr(), then.data_ptr(), now.nbytes()) == 0;
  }
  // Changes through .data() (clip_grad_norm_ uses it) keep the version: a
  // few elements of each chunk are compared with what was pushed.
  // (On a device only the version counts: reading it back would cost a sync.)
  if (g.scalar_type() != torch::kFloat || !g.is_contiguous() || !g.is_cpu()) return true;
  const float* now = g.data_ptr<float>();
  for (const BucketLayout::Segment& s : layout_->segments(t)) {
    const float* pushed = bucket_data_[s.bucket] + s.bucket_offset;
    for (size_t i : {size_t{0}, s.numel / 3, s.numel / 2, s.numel - 1}) {
      if (std::memcmp(&pushed[i], &now[s.tensor_offset + i], sizeof(float)) != 0) return false;
    }
  }
  return true;
}

void DataParallel::Impl::CheckGradientsUnchanged() const {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (!arrived_[t] || pushed_grads_[t].impl == nullptr || SameAsPushed(t)) continue;
    throw Error(
        "een: the gradient of '" + tensors_[t].name +
        "' changed between backward() and "
        "Step() (torch::nn::utils::clip_grad_norm_, or another change of .grad?): EEN pushed it "
        "as backward produced it, so the change cannot take effect. " +
        (SumMode()
             ? std::string("In sum mode change the mean gradient after Step(), before your "
                           "optimizer's step().")
             : std::string("With a server optimizer, clip on the servers with "
                           "OptimizerConfig::WithClipGradNorm(max_norm) (torch's clip_grad_norm_ "
                           "of the mean gradient), and use set_learning_rate() for schedules.")));
  }
}

void DataParallel::Impl::SetNoSync(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  if (on && no_sync_) throw Error("een: dp.no_sync() scopes do not nest");
  no_sync_ = on;
}

void DataParallel::Impl::SetLearningRate(double lr) {
  if (SumMode()) {
    throw Error(
        "een: set_learning_rate() in sum mode (OptimizerConfig::Sum()): your own torch "
        "optimizer steps there; set the learning rate of its param groups");
  }
  if (!std::isfinite(lr) || lr < 0) {
    throw Error("een: the learning rate must be a finite number >= 0 (got " + std::to_string(lr) +
                ")");
  }
  std::lock_guard<std::mutex> lock(mu_);
  lr_ = lr;  // taken by the next step's first gradient
}

double DataParallel::Impl::LearningRate() const { return lr_ >= 0 ? lr_ : optimizer_.lr; }

void DataParallel::Impl::PushBucket(uint32_t bucket) {
  if (recovery_pending_) return;  // Step() recovers, then sends every bucket
  const BucketLayout::Bucket& b = layout_->buckets()[bucket];
  client_->recorder().Record(EventKind::kBucketReady, step_, std::chrono::steady_clock::now(),
                             bucket);
  std::vector<const float*> data;
  for (size_t off : b.chunk_offsets) data.push_back(bucket_data_[bucket] + off);
  Status s =
      client_->Push(wire::PushKind::GRADIENT, step_, b.chunks, data, buckets_[bucket].buffer);
  if (timeline_) timeline_->BucketPushed(bucket, b.numel * sizeof(float), !in_step_);
  if (!s.ok() && client_->NeedsRecovery()) {
    recovery_pending_ = true;  // Step() rolls back
    return;
  }
  ThrowIfError(s, "pushing gradients of step " + std::to_string(step_));
}

Status DataParallel::Impl::TryPullInto(uint64_t version, bool gradients) {
  BeforePull();
  if (gradients) {
    for (Registered& r : tensors_) {
      if (r.kind == TensorKind::kParameter && !r.tensor.grad().defined()) {
        r.tensor.mutable_grad() = torch::zeros_like(r.tensor);
      }
    }
  }
  EEN_RETURN_IF_ERROR(
      client_->Pull(version, gradients, [&](uint32_t c) { return Destination(c, gradients); }));
  StorePulled(gradients);
  return Status::Ok();
}

void DataParallel::Impl::JoinPull() {
  BeforePull();
  auto pulled = client_->PullRecovering(
      step_, [&](uint32_t c) { return Destination(c, false); }, /*frozen_too=*/true,
      /*max_recoveries=*/std::numeric_limits<int>::max());
  ThrowIfError(pulled.status(), "pulling parameters");
  step_ = *pulled;
  // ssp/async: a snapshot holds each worker's own steps (the PS drop the
  // ones it resends); takes up where this worker got to.
  if (client_->resumed() && client_->consistency().per_arrival()) {
    step_ = std::max(step_, client_->OwnSteps());
  }
  StorePulled(false);
}

void DataParallel::Impl::PullInto(uint64_t version, bool gradients) {
  // Everything, frozen parameters too: joining, or back to a snapshot.
  ThrowIfError(PullEverything(version, gradients),
               gradients ? "pulling mean gradients" : "pulling parameters");
  StorePulled(gradients);
}

void DataParallel::Impl::PullLatest() {
  ThroughPsLoss([&](int) { return PullEverything(step_, /*gradients=*/false); },
                "pulling parameters", [&](uint64_t step) { RollBack(step); });  // throws RolledBack
  StorePulled(false);
}

Status DataParallel::Impl::PullEverything(uint64_t version, bool gradients) {
  BeforePull();
  return client_->Pull(
      version, gradients, [&](uint32_t c) { return Destination(c, gradients); },
      /*frozen_too=*/true);
}

void DataParallel::Impl::ThroughPsLoss(const std::function<Status(int recoveries)>& attempt,
                                       const std::string& what,
                                       const std::function<void(uint64_t step)>& rolled_back) {
  for (int recoveries = 0;; ++recoveries) {
    const Status s = attempt(recoveries);
    if (s.ok()) return;
    if (!client_->NeedsRecovery() || recoveries == 10) ThrowIfError(s, what);
    auto recovery = client_->Recover();
    ThrowIfError(recovery.status(), "recovering after a PS was lost");
    if (recovery->rolled_back) rolled_back(recovery->step);
  }
}

void DataParallel::Impl::Recover() {
  auto recovery = client_->Recover();
  ThrowIfError(recovery.status(), "recovering after a PS was lost");
  if (recovery->rolled_back) RollBack(recovery->step);
  std::lock_guard<std::mutex> lock(mu_);
  recovery_pending_ = false;
  // Every bucket is complete by now; PS that already counted one drop the repeat.
  for (uint32_t b = 0; b < buckets_.size() && !recovery_pending_; ++b) PushBucket(b);
  PushValues();
}

void DataParallel::Impl::RollBack(uint64_t step) {
  PullInto(step, /*gradients=*/false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // ssp/async: the snapshot holds this worker's own steps, maybe past `step`.
    step_ = client_->consistency().per_arrival() ? std::max(step, client_->OwnSteps()) : step;
    recovery_pending_ = false;
    in_step_ = false;
    backward_seen_ = false;
    ResetBuckets();
    ClearGradients();  // the abandoned step's must not add to the redone step's
    NoteParameterVersions();
  }
  client_->ReportProgress(step_, std::nullopt, samples_, 0, 0);
  client_->LeaveStep();
  last_step_end_.reset();
  ++rollbacks_;
  rollback_steps_.push_back(step_);
  if (rollback_steps_.size() > 64) rollback_steps_.pop_front();
  throw RolledBack(step_);
}

void DataParallel::Impl::WriteTrace() {
  std::ofstream out(trace_path_);
  out << "# een trace v1: recorded by worker 0 (EEN_TRACE_RECORD)\n"
      << "# one backward pass, in the order gradients became ready; name<TAB>numel\n";
  for (size_t t : arrival_) out << tensors_[t].name << '\t' << tensors_[t].tensor.numel() << '\n';
  for (size_t t = 0; t < tensors_.size(); ++t) {  // parameters with no gradient: last
    if (tensors_[t].kind == TensorKind::kParameter &&
        std::find(arrival_.begin(), arrival_.end(), t) == arrival_.end()) {
      out << tensors_[t].name << '\t' << tensors_[t].tensor.numel() << '\n';
    }
  }
  out.flush();
  if (!out)
    spdlog::warn("could not write the trace to {}", trace_path_);
  else
    spdlog::info("wrote the gradient order of one step to {}", trace_path_);
  trace_path_.clear();
}

void DataParallel::Impl::CheckStepAllowed() {
  if (!hook_error_.empty()) throw Error(std::exchange(hook_error_, ""));
  if (no_sync_) {
    throw Error(
        "een: Step() inside dp.no_sync(): end the scope and run the last backward() "
        "outside it first (it pushes the accumulated gradients)");
  }
  if (!backward_seen_ && AccumulatorsReplaced()) {
    throw Error(
        "een: Step() at step " + std::to_string(step_) +
        ": no gradient reached EEN because the module's parameters were replaced in place after "
        "DataParallel was made (torch::load of the module does that): load the module before "
        "making DataParallel, or call LoadState()/LoadStateFrom() after loading");
  }
  if (!backward_seen_) {
    throw Error("een: Step() at step " + std::to_string(step_) +
                " without a backward() "
                "since the last step: there is no gradient to push (zeros would still move "
                "Adam's parameters). Call loss.backward() before each Step() (backward passes "
                "inside no_sync() are pushed by the first one after it); a worker with no more "
                "data calls Finish() and the others go on without it");
  }
  CheckGradientsUnchanged();
  CheckParametersUnchanged();
}

void DataParallel::Impl::NoteParameterVersions() {
  for (Registered& r : tensors_) {
    if (r.kind == TensorKind::kParameter) r.version = r.tensor._version();
  }
}

void DataParallel::Impl::CheckParametersUnchanged() const {
  if (SumMode()) return;
  for (const Registered& r : tensors_) {
    if (r.kind != TensorKind::kParameter || r.version < 0 || r.tensor._version() == r.version) {
      continue;
    }
    throw Error(
        "een: parameter '" + r.name +
        "' was changed in place since the last step (a torch optimizer's step() beside "
        "Step()?). With a server optimizer the parameter servers update the weights: remove "
        "the program's optimizer.step() (" +
        (local_ ? std::string("here it would move the weights a second time")
                : std::string("in a job the next pull would undo it")) +
        "); for your own optimizer on the workers use OptimizerConfig::Sum()");
  }
}

void DataParallel::Impl::LocalStep(int64_t samples) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckStepAllowed();
  backward_seen_ = false;
  for (Registered& r : tensors_) {  // as in a job: no gradient counts as a zero one
    if (r.kind == TensorKind::kParameter && !r.tensor.grad().defined()) {
      r.tensor.mutable_grad() = torch::zeros_like(r.tensor);
    }
  }
  {
    torch::NoGradGuard no_grad;
    grad_norm_ = local_->Step();
  }
  if (!SumMode()) ClearGradients();
  for (torch::Tensor& g : local_grads_) g = torch::Tensor();
  arrived_.assign(tensors_.size(), false);
  NoteParameterVersions();
  step_++;
  samples_ += samples > 0 ? samples : 0;
}

void DataParallel::Impl::Step(std::optional<double> loss, int64_t samples) {
  if (local_) return LocalStep(samples);
  if (!trace_path_.empty()) WriteTrace();
  const auto start = std::chrono::steady_clock::now();
  client_->EnterStep();
  if (stager_) stager_->Drain();  // every staged gradient is in its bucket (and pushed)
  {
    std::lock_guard<std::mutex> lock(mu_);
    CheckStepAllowed();
    if (backward_seen_) {
      client_->recorder().Record(EventKind::kBackward, step_, backward_begin_, start);
    }
    backward_seen_ = false;
    in_step_ = true;
    if (timeline_) timeline_->StepBegins(step_);
    // Parameters without a gradient this step contribute zeros.
    for (size_t t = 0; t < tensors_.size(); ++t) {
      if (arrived_[t] || tensors_[t].kind != TensorKind::kParameter) continue;
      for (const BucketLayout::Segment& s : layout_->segments(t)) {
        std::memset(bucket_data_[s.bucket] + s.bucket_offset, 0, s.numel * sizeof(float));
      }
      Arrived(t);
    }
  }
  PushValues();
  while (true) {
    if (!recovery_pending_) {
      Status s = Status::Ok();
      if (client_->clipping()) {  // the servers hold the step back until they know the norm
        Result<double> norm = client_->ClipGradients(step_);
        s = norm.status();
        if (norm.ok()) grad_norm_ = *norm;
      }
      if (s.ok()) s = TryPullInto(step_ + 1, client_->sum_mode());
      if (s.ok()) break;
      if (!client_->NeedsRecovery()) {
        ThrowIfError(s, "pulling parameters of step " + std::to_string(step_ + 1));
      }
    }
    Recover();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!client_->sum_mode()) ClearGradients();  // pushed and applied
  ResetBuckets();
  NoteParameterVersions();
  in_step_ = false;
  if (timeline_) timeline_->StepEnds();
  step_++;
  samples_ += samples > 0 ? samples : 0;
  const auto end = std::chrono::steady_clock::now();
  const auto micros = [](auto d) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  };
  const uint64_t compute = last_step_end_ ? micros(start - *last_step_end_) : 0;
  client_->recorder().Record(EventKind::kSync, step_ - 1, start, end);
  last_step_end_ = end;
  client_->ReportProgress(step_, loss, samples_, micros(end - start), compute);
  client_->LeaveStep();
}

DataParallel::DataParallel(torch::nn::Module& module, DataParallelOptions options)
    : impl_(std::make_unique<Impl>(module, std::move(options))) {}

DataParallel::~DataParallel() {
  if (!impl_->client_) return;  // local mode: no job to leave
  if (std::uncaught_exceptions() > 0) {
    // Unwinding from an error: this worker did not finish; its exit tells.
    impl_->client_->Abandon();
    return;
  }
  try {
    Finish();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
}

// Local mode: rank 0 of 1, nobody joins or leaves.
int DataParallel::rank() const { return impl_->client_ ? impl_->client_->rank() : 0; }
int DataParallel::world_size() const { return impl_->client_ ? impl_->client_->world_size() : 1; }
uint64_t DataParallel::step() const { return impl_->step_; }
int DataParallel::live_count() const {
  return impl_->client_ ? static_cast<int>(impl_->client_->live_workers().size()) : 1;
}
int DataParallel::live_index() const { return impl_->client_ ? impl_->client_->live_index() : 0; }
uint64_t DataParallel::rollbacks() const { return impl_->rollbacks_; }
std::vector<MembershipChange> DataParallel::membership_changes() const {
  if (!impl_->client_) return {};
  return impl_->client_->membership_changes();
}
void DataParallel::Impl::CheckNotLeft(const char* call) const {
  if (left_) {
    throw Error(std::string("een: ") + call +
                    " after Finish(): this worker has left the job (the others go on "
                    "without it)",
                Error::Code::kJobFinished);
  }
}

void DataParallel::Step(double loss, int64_t samples) {
  impl_->CheckNotLeft("Step()");
  impl_->StepThroughRollback(loss, samples);
}
void DataParallel::Step() {
  impl_->CheckNotLeft("Step()");
  impl_->StepThroughRollback(std::nullopt, 0);
}
void DataParallel::Impl::StepThroughRollback(std::optional<double> loss, int64_t samples) {
  constexpr size_t kCallsKept = 4096;
  call_log_.push_back({step_, rollbacks_});
  if (call_log_.size() > kCallsKept) call_log_.pop_front();
  ++steps_called_;
  try {
    Step(loss, samples);
  } catch (const RolledBack& back) {
    // A loop over a following sampler gets the redone steps' batches from it (under ssp/async
    // what it drew for this worker's steps from the snapshot's).
    if (following_samplers_ == 0 || raise_rolled_back_) throw;
    spdlog::warn("{}; the sampler gives the batches from there again", back.what());
  }
}
void DataParallel::set_learning_rate(double lr) { impl_->SetLearningRate(lr); }
double DataParallel::learning_rate() const { return impl_->LearningRate(); }
double DataParallel::grad_norm() const { return impl_->grad_norm_; }
void DataParallel::AddFollowingSampler(int change) { impl_->following_samplers_ += change; }
const void* DataParallel::training_sampler() const { return impl_->training_sampler_; }
void DataParallel::set_training_sampler(const void* sampler) { impl_->training_sampler_ = sampler; }
uint64_t DataParallel::job_data_batch() const {
  return impl_->client_ ? impl_->client_->data_batch() : 0;
}
void DataParallel::NoteJobDataBatch(uint64_t batch) {
  if (impl_->client_) impl_->client_->NoteDataBatch(batch);
}
bool DataParallel::sum_mode() const { return impl_->SumMode(); }
bool DataParallel::raises_rolled_back() const { return impl_->raise_rolled_back_; }
uint64_t DataParallel::steps_called() const { return impl_->steps_called_; }
std::optional<DataParallel::StepCall> DataParallel::step_call(uint64_t call) const {
  const uint64_t first = impl_->steps_called_ - impl_->call_log_.size();
  if (call < first || call >= impl_->steps_called_) return std::nullopt;
  return impl_->call_log_[call - first];
}
std::optional<uint64_t> DataParallel::rolled_back_to(uint64_t rollback) const {
  const uint64_t first = impl_->rollbacks_ - impl_->rollback_steps_.size() + 1;
  if (rollback < first || rollback > impl_->rollbacks_) return std::nullopt;
  return impl_->rollback_steps_[rollback - first];
}
std::vector<MembershipChange> DataParallel::known_membership_changes() const {
  if (!impl_->client_) return {};
  return impl_->client_->known_changes();
}
void DataParallel::NoteDataLookAhead(uint64_t steps) {
  if (impl_->client_) impl_->client_->NoteDataLookAhead(steps);
}
uint64_t DataParallel::NextBatch() { return DealtBatchFrom(0, impl_->step_); }
uint64_t DataParallel::DealtBatchFrom(uint64_t not_before, uint64_t for_step) {
  impl_->CheckNotLeft("NextBatch()");
  if (!impl_->client_) {
    impl_->local_batches_ = std::max(impl_->local_batches_, not_before);
    return impl_->local_batches_++;
  }
  if (!impl_->client_->consistency().per_arrival()) {
    // Under bsp every worker must take the same steps: dealt batches would
    // leave one worker a step short while the others wait for it.
    throw Error(
        "een: NextBatch() deals batches out under --consistency ssp:K or async; under bsp "
        "every worker takes the same steps: use DistributedSampler (Batch(), PositionAfter())",
        Error::Code::kFailedPrecondition);
  }
  return impl_->DealBatch(not_before, for_step);
}
uint64_t DataParallel::Impl::DealBatch(uint64_t not_before, uint64_t for_step) {
  // A rollback gave this worker back its steps from the snapshot's: the batches dealt for them
  // come again, first (the coordinator deals on from where it was, so none comes twice).
  if (dealt_rollbacks_ != rollbacks_) {
    dealt_rollbacks_ = rollbacks_;
    if (const size_t again = dealt_.Rollback(step_); again > 0) {
      spdlog::info(
          "rolled back to this worker's step {}: NextBatch() deals the {} batch(es) it "
          "dealt for its steps since then again",
          step_, again);
    }
  }
  std::optional<uint64_t> batch = dealt_.Again();
  if (!batch) {
    Result<uint64_t> index = client_->ClaimBatch(std::max(for_step, step_), not_before);
    ThrowIfError(index.status(), "claiming the next batch");
    batch = *index;
  }
  dealt_.Note(std::max(for_step, step_), *batch);
  return *batch;
}
void DataParallel::PullParameters() {
  impl_->CheckNotLeft("PullParameters()");
  if (!impl_->client_) return;  // local: the values are here
  if (impl_->client_->sum_mode()) {
    throw Error(
        "een: PullParameters(): in sum mode the parameter servers hold mean gradients, "
        "not parameters (your optimizer keeps them here)",
        Error::Code::kInvalidArgument);
  }
  impl_->PullLatest();
}
bool DataParallel::dynamic_slicing() const {
  return impl_->client_ && impl_->client_->dynamic_slicing();
}
DataParallel::BatchSlice DataParallel::batch_slice(uint64_t batch) {
  impl_->CheckNotLeft("batch_slice()");
  if (batch == 0) throw Error("een: batch_slice(0): a batch has at least one sample");
  if (!impl_->client_) return {0, batch};
  const uint64_t live = impl_->client_->live_workers().size();
  if (batch > (uint64_t{1} << 31) / std::max<uint64_t>(live, 1)) {
    throw Error("een: batch_slice(" + std::to_string(batch) + "): a global batch over 2^31 samples",
                Error::Code::kInvalidArgument);
  }
  Result<WorkerClient::Slice> slice = impl_->client_->SliceOf(batch * live, impl_->step_);
  ThrowIfError(slice.status(), "batch_slice()");
  return {slice->offset, slice->count};
}
std::string DataParallel::consistency() const {
  return impl_->client_ ? impl_->client_->consistency().Name() : "bsp";
}
uint64_t DataParallel::staleness() const {
  return impl_->client_ ? impl_->client_->Staleness() : 0;
}

DataParallel::NoSync DataParallel::no_sync() {
  impl_->SetNoSync(true);
  return NoSync(this);
}
DataParallel::NoSync::NoSync(NoSync&& other) noexcept : dp_(other.dp_) { other.dp_ = nullptr; }
DataParallel::NoSync::~NoSync() {
  if (dp_) dp_->impl_->SetNoSync(false);
}
void DataParallel::Barrier() {
  impl_->CheckNotLeft("Barrier()");
  if (impl_->client_) impl_->Barrier();
}

void DataParallel::Impl::Barrier() {
  while (true) {
    const Status s = client_->Barrier();
    if (s.code() != StatusCode::kStaleEpoch) return ThrowIfError(s, "barrier");
    // A lost PS rolled the job back while this worker waited: its steps
    // from the snapshot are redone (RollBack throws een::RolledBack).
    auto recovery = client_->Recover();
    ThrowIfError(recovery.status(), "recovering after a PS was lost");
    if (recovery->rolled_back) RollBack(recovery->step);
  }
}
void DataParallel::Finish(bool final_values) {
  if (impl_->left_) return;
  impl_->left_ = true;
  if (!impl_->client_) return;
  if (!final_values || impl_->SumMode()) {
    ThrowIfError(impl_->client_->Finish(), "finishing");
    return;
  }
  impl_->FinishWithFinalValues();
}

void DataParallel::Impl::FinishWithFinalValues() {
  ThrowIfError(client_->FinishAwaitingFinal(step_), "finishing");
  Result<std::optional<uint64_t>> final_step = client_->AwaitFinal();
  ThrowIfError(final_step.status(), "waiting for the job's final values");
  // Under bsp a worker that took the last step holds the final values; under
  // ssp/async each pulls them (its own steps are all in).
  const bool per_arrival = client_->consistency().per_arrival();
  if (!*final_step || (!per_arrival && **final_step <= step_)) {
    client_->StopHeartbeats();
    return;
  }
  const uint64_t version = per_arrival ? step_ : **final_step;
  ThroughPsLoss([&](int) { return PullEverything(version, /*gradients=*/false); },
                "pulling the job's final values", [](uint64_t) {});
  StorePulled(false);
  if (!per_arrival) step_ = version;
  NoteParameterVersions();
  spdlog::info("took the job's final values (step {})", **final_step);
  ThrowIfError(client_->FinalTaken(), "finishing");
}
void DataParallel::Abandon() {
  impl_->left_ = true;
  if (impl_->client_) impl_->client_->Abandon();
}

}  // namespace een
