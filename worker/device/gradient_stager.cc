#include "worker/device/gradient_stager.h"

namespace een {

GradientStager::GradientStager(const BucketLayout& layout, std::vector<float*> buckets,
                               DeviceCopies& copies, std::function<void(uint32_t)> arrived)
    : layout_(layout),
      buckets_(std::move(buckets)),
      copies_(copies),
      arrived_(std::move(arrived)),
      thread_([this] { Loop(); }) {}

GradientStager::~GradientStager() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ == 0; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradientStager::Stage(uint32_t t, const at::Tensor& grad) {
  const at::Tensor flat = grad.reshape({-1});
  Staged staged{t, {}};
  for (const BucketLayout::Segment& s : layout_.segments(t)) {
    const at::Tensor piece = flat.slice(0, static_cast<int64_t>(s.tensor_offset),
                                        static_cast<int64_t>(s.tensor_offset + s.numel));
    staged.copies.push_back(copies_.ToHost(piece, buckets_[s.bucket] + s.bucket_offset));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(staged));
    in_flight_++;
  }
  cv_.notify_all();
}

void GradientStager::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return in_flight_ == 0; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

size_t GradientStager::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void GradientStager::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Staged staged = std::move(queue_.front());
    queue_.pop_front();
    const bool failed = error_ != nullptr;  // after a failure only drain
    lock.unlock();
    try {
      for (auto& copy : staged.copies) copy->Wait();
      staged.copies.clear();  // the gradients may go now
      if (!failed) arrived_(staged.tensor);
    } catch (...) {
      std::lock_guard<std::mutex> relock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    in_flight_--;
    cv_.notify_all();
  }
}

}  // namespace een
