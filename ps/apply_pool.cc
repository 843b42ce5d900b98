#include "ps/apply_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace een::ps {

int ApplyPool::DefaultThreads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1u, 8u));
}

ApplyPool::ApplyPool(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { Help(); });
}

ApplyPool::~ApplyPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void ApplyPool::RunIndices() {
  std::unique_lock<std::mutex> lock(mu_);
  while (next_ < n_) {
    const size_t i = next_++;
    const auto* fn = fn_;
    lock.unlock();
    (*fn)(i);
    lock.lock();
    if (++finished_ == n_) done_cv_.notify_all();
  }
}

void ApplyPool::Help() {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && next_ < n_); });
      if (stop_) return;
      seen = generation_;
    }
    RunIndices();
  }
}

void ApplyPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (helpers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    finished_ = 0;
    ++generation_;
  }
  work_cv_.notify_all();
  RunIndices();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return finished_ == n_; });
  fn_ = nullptr;
  n_ = 0;
}

}  // namespace een::ps
