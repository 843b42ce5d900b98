// ApplyPool: the PS's optimizer threads.
//
// ParallelFor(n, fn) runs fn(0) .. fn(n-1), each index exactly once, on the
// pool's threads and the calling thread together, and returns when all are
// done. With one thread (or n == 1) everything runs on the caller. Calls
// must not nest, and one ParallelFor runs at a time (the PS event loop is
// the only caller). fn must not throw.
// Threads: EEN_PS_THREADS if set (1 .. 256), else the machine's cores, at
// most 8.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace een::ps {

class ApplyPool {
 public:
  explicit ApplyPool(int threads);
  ~ApplyPool();
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  // The machine's cores, at most 8 (a job sets its own: EEN_PS_THREADS).
  static int DefaultThreads();

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

 private:
  void Help();
  // Runs indices until none are left to take.
  void RunIndices();

  std::vector<std::thread> helpers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0, next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace een::ps
