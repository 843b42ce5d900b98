// The LibTorch integration: the only worker file that includes torch.
#include "een/data_parallel.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <mutex>

#include "common/logging.h"
#include "worker/bucket_layout.h"
#include "worker/timeline.h"
#include "worker/worker_client.h"

namespace een {

namespace {

void ThrowIfError(const Status& s, const std::string& where) {
  if (!s.ok()) throw Error("een: " + where + ": " + s.message());
}

}  // namespace

class DataParallel::Impl {
 public:
  Impl(torch::nn::Module& module, DataParallelOptions options);
  ~Impl();

  void OnGradient(size_t tensor, const torch::Tensor& grad);
  void Step(double loss, int64_t samples);

  std::unique_ptr<WorkerClient> client_;
  uint64_t step_ = 0;
  uint64_t samples_ = 0;

 private:
  struct BucketState {
    std::shared_ptr<float> buffer;  // shared with in-flight frames
    size_t pending = 0;                          // tensors still to arrive
  };

  void BuildBuckets(size_t bucket_bytes);
  void ResetBuckets();
  // Marks tensor `t` as arrived and pushes each bucket it completes.
  void Arrived(size_t t);
  void PushBucket(uint32_t bucket);
  void PullInto(uint64_t version, bool gradients);
  Status TryPullInto(uint64_t version, bool gradients);
  // The map moved on: fetch it; after a rollback go back to that step
  // (throws RolledBack), after a failover resend this step's buckets.
  void Recover();
  [[noreturn]] void RollBack(uint64_t step);

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<unsigned> hooks_;
  std::unique_ptr<BucketLayout> layout_;
  std::vector<BucketState> buckets_;
  std::vector<float*> bucket_data_;
  std::vector<bool> arrived_;
  bool recovery_pending_ = false;  // a push or pull found the map moved on
  // EEN_TRACE_RECORD=FILE: worker 0 writes the first step's gradient order
  // there (samples/traces/README.md has the format).
  std::string trace_path_;
  std::vector<size_t> arrival_;
  void WriteTrace();
  // EEN_TIMELINE=PREFIX: when backward, pushes and syncs happened (timeline.h).
  std::unique_ptr<Timeline> timeline_;
  bool in_step_ = false;  // pushes from Step() came after backward
  std::mutex mu_;  // hooks may run on autograd's threads
};

DataParallel::Impl::Impl(torch::nn::Module& module, DataParallelOptions options) {
  auto env = JobEnvironment::FromProcess("this program");
  ThrowIfError(env.status(), "cannot join a job");
  if (spdlog::get("een:worker " + std::to_string(env->rank)) == nullptr) {
    InitLogging("worker " + std::to_string(env->rank));
  }
  if (env->bucket_bytes > 0) options.bucket_bytes = env->bucket_bytes;
  if (options.bucket_bytes == 0) throw Error("een: bucket_bytes must be positive");
  if (env->rank == 0) trace_path_ = env->trace_record;
  if (!env->timeline.empty()) {
    timeline_ = std::make_unique<Timeline>(
        env->timeline + ".worker-" + std::to_string(env->rank) + ".json", env->rank, 50);
  }
  std::vector<TensorInfo> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (p.scalar_type() != torch::kFloat || !p.is_cpu() || !p.is_contiguous() || p.is_sparse()) {
      throw Error("een: parameter '" + item.key() + "' must be a dense contiguous float32 CPU "
                  "tensor (got " + std::string(c10::toString(p.scalar_type())) + " on " +
                  p.device().str() + ")");
    }
    params_.push_back(p);
    names_.push_back(item.key());
    tensors.push_back({item.key(), static_cast<uint64_t>(p.numel())});
  }
  if (params_.empty()) throw Error("een: the module has no trainable parameters");
  auto joined = WorkerClient::Join(*env, tensors, options.optimizer);
  ThrowIfError(joined.status(), "cannot join the job at " + env->coordinator);
  client_ = std::move(joined).value();
  BuildBuckets(options.bucket_bytes);

  // Every worker starts from rank 0's parameters, or from the snapshot.
  step_ = client_->start_step();
  if (client_->rank() == 0 && !client_->resumed()) {
    const ShardMap& map = client_->map();
    auto values = std::make_shared<std::vector<float>>(map.TotalNumel());
    std::vector<uint32_t> chunks;
    std::vector<const float*> data;
    size_t at = 0;
    for (uint32_t c = 0; c < map.chunks().size(); ++c) {
      const Chunk& chunk = map.chunks()[c];
      std::memcpy(values->data() + at, params_[chunk.tensor].data_ptr<float>() + chunk.offset,
                  chunk.numel * sizeof(float));
      chunks.push_back(c);
      data.push_back(values->data() + at);
      at += chunk.numel;
    }
    ThrowIfError(client_->Push(wire::PushKind::INITIAL, 0, chunks, data, values),
                 "sending initial parameters");
  }
  PullInto(step_, /*gradients=*/false);

  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].register_hook([this, i](torch::Tensor grad) { OnGradient(i, grad); }));
  }
  spdlog::info("joined as worker {} of {}: {} tensors, {} buckets, optimizer on {}{}",
               client_->rank(), client_->world_size(), params_.size(), buckets_.size(),
               client_->sum_mode() ? "this worker (sum mode)" : "the parameter servers",
               client_->resumed() ? ", resuming at step " + std::to_string(step_) : "");
}

DataParallel::Impl::~Impl() {
  for (size_t i = 0; i < hooks_.size(); ++i) params_[i].remove_hook(hooks_[i]);
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
  arrived_.assign(params_.size(), false);
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

void DataParallel::Impl::OnGradient(size_t t, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mu_);
  if (arrived_[t]) {
    throw Error("een: the gradient of '" + names_[t] + "' arrived twice in step " +
                std::to_string(step_) + "; call Step() after each backward()");
  }
  if (!trace_path_.empty()) arrival_.push_back(t);
  if (timeline_) timeline_->BackwardBegins(Timeline::Clock::now());
  torch::Tensor g = grad;
  if (g.is_sparse()) throw Error("een: sparse gradient for '" + names_[t] + "' is not supported");
  if (!g.is_cpu() || g.scalar_type() != torch::kFloat) g = g.to(torch::kCPU, torch::kFloat);
  g = g.contiguous();
  layout_->Pack(t, g.data_ptr<float>(), bucket_data_);
  Arrived(t);
}

void DataParallel::Impl::PushBucket(uint32_t bucket) {
  if (recovery_pending_) return;  // Step() recovers, then sends every bucket
  const BucketLayout::Bucket& b = layout_->buckets()[bucket];
  std::vector<const float*> data;
  for (size_t off : b.chunk_offsets) data.push_back(bucket_data_[bucket] + off);
  Status s = client_->Push(wire::PushKind::GRADIENT, step_, b.chunks, data,
                           buckets_[bucket].buffer);
  if (timeline_) timeline_->BucketPushed(bucket, b.numel * sizeof(float), !in_step_);
  if (!s.ok() && client_->NeedsRecovery()) {
    recovery_pending_ = true;  // Step() rolls back
    return;
  }
  ThrowIfError(s, "pushing gradients of step " + std::to_string(step_));
}

Status DataParallel::Impl::TryPullInto(uint64_t version, bool gradients) {
  const ShardMap& map = client_->map();
  if (gradients) {
    for (torch::Tensor& p : params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
  }
  return client_->Pull(version, gradients, [&](uint32_t c) {
    const Chunk& chunk = map.chunks()[c];
    torch::Tensor& p = params_[chunk.tensor];
    return (gradients ? p.grad() : p).data_ptr<float>() + chunk.offset;
  });
}

void DataParallel::Impl::PullInto(uint64_t version, bool gradients) {
  ThrowIfError(TryPullInto(version, gradients),
               gradients ? "pulling mean gradients" : "pulling parameters");
}

void DataParallel::Impl::Recover() {
  auto recovery = client_->Recover();
  ThrowIfError(recovery.status(), "recovering after a PS was lost");
  if (recovery->rolled_back) RollBack(recovery->step);
  std::lock_guard<std::mutex> lock(mu_);
  recovery_pending_ = false;
  // Every bucket is complete by now; PS that already counted one drop the repeat.
  for (uint32_t b = 0; b < buckets_.size() && !recovery_pending_; ++b) PushBucket(b);
}

void DataParallel::Impl::RollBack(uint64_t step) {
  PullInto(step, /*gradients=*/false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    recovery_pending_ = false;
    in_step_ = false;
    ResetBuckets();
  }
  client_->ReportProgress(step_, 0.0, samples_, 0);
  throw RolledBack(step_);
}

void DataParallel::Impl::WriteTrace() {
  std::ofstream out(trace_path_);
  out << "# een trace v1: recorded by worker 0 (EEN_TRACE_RECORD)\n"
      << "# one backward pass, in the order gradients became ready; name<TAB>numel\n";
  for (size_t t : arrival_) out << names_[t] << '\t' << params_[t].numel() << '\n';
  for (size_t t = 0; t < params_.size(); ++t) {  // parameters with no gradient: last
    if (std::find(arrival_.begin(), arrival_.end(), t) == arrival_.end()) {
      out << names_[t] << '\t' << params_[t].numel() << '\n';
    }
  }
  out.flush();
  if (!out) spdlog::warn("could not write the trace to {}", trace_path_);
  else spdlog::info("wrote the gradient order of one step to {}", trace_path_);
  trace_path_.clear();
}

void DataParallel::Impl::Step(double loss, int64_t samples) {
  if (!trace_path_.empty()) WriteTrace();
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_step_ = true;
    if (timeline_) timeline_->StepBegins(step_);
    // Parameters without a gradient this step contribute zeros.
    for (size_t t = 0; t < params_.size(); ++t) {
      if (arrived_[t]) continue;
      for (const BucketLayout::Segment& s : layout_->segments(t)) {
        std::memset(bucket_data_[s.bucket] + s.bucket_offset, 0, s.numel * sizeof(float));
      }
      Arrived(t);
    }
  }
  while (true) {
    if (!recovery_pending_) {
      Status s = TryPullInto(step_ + 1, client_->sum_mode());
      if (s.ok()) break;
      if (!client_->NeedsRecovery()) {
        ThrowIfError(s, "pulling parameters of step " + std::to_string(step_ + 1));
      }
    }
    Recover();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ResetBuckets();
  in_step_ = false;
  if (timeline_) timeline_->StepEnds();
  step_++;
  samples_ += samples > 0 ? samples : 0;
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - start).count();
  client_->ReportProgress(step_, std::isnan(loss) ? 0.0 : loss, samples_, micros);
}

DataParallel::DataParallel(torch::nn::Module& module, DataParallelOptions options)
    : impl_(std::make_unique<Impl>(module, std::move(options))) {}

DataParallel::~DataParallel() {
  try {
    Finish();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
}

int DataParallel::rank() const { return impl_->client_->rank(); }
int DataParallel::world_size() const { return impl_->client_->world_size(); }
uint64_t DataParallel::step() const { return impl_->step_; }
int DataParallel::live_count() const {
  return static_cast<int>(impl_->client_->live_workers().size());
}
int DataParallel::live_index() const { return impl_->client_->live_index(); }
std::vector<MembershipChange> DataParallel::membership_changes() const {
  return impl_->client_->membership_changes();
}
void DataParallel::Step(double loss, int64_t samples) { impl_->Step(loss, samples); }
void DataParallel::Barrier() { ThrowIfError(impl_->client_->Barrier(), "barrier"); }
void DataParallel::Finish() { ThrowIfError(impl_->client_->Finish(), "finishing"); }

}  // namespace een
