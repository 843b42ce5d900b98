// FakeDeviceCopies: a DeviceCopies for tests, on CPU tensors, whose copies
// complete later than asked, in order, like a device stream's:
//   kThread: a thread of its own runs each copy after `delay` (a whole job
//            trains through it with EEN_FAKE_DEVICE_COPIES=1, see
//            data_parallel.cc: CPU parameters take the device path);
//   kManual: a copy runs only when the test calls RunNext() / RunAll()
//            (a Wait() blocks until then, as on a device).
// A copy reads its source when it runs, not when it is queued, so reading a
// gradient before its copy completed, or freeing it early, shows up as
// wrong values (and under AddressSanitizer as a use after free).
// Counters say how many copies were queued and run; live_sources() how many
// sources copies still hold. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "worker/device/device_copies.h"

namespace een {

class FakeDeviceCopies : public DeviceCopies {
 public:
  enum class Mode { kThread, kManual };
  explicit FakeDeviceCopies(Mode mode,
                            std::chrono::microseconds delay = std::chrono::microseconds(200));
  ~FakeDeviceCopies() override;

  std::unique_ptr<Pending> ToHost(const at::Tensor& source, float* dest) override;
  void ToDevice(const float* source, const at::Tensor& dest) override;
  void FenceCurrentStream() override;  // the host is the "current stream": waits
  void WaitToDevice() override;

  // kManual: runs the oldest queued copy (false if none) / every queued copy.
  bool RunNext();
  void RunAll();
  size_t queued() const;
  size_t runs() const;

 private:
  struct Job {
    std::function<void()> copy;
    uint64_t ticket;
  };
  class FakePending;
  uint64_t Enqueue(std::function<void()> copy);
  bool Finished(uint64_t ticket) const;
  void WaitFor(uint64_t ticket);
  void Loop();

  const Mode mode_;
  const std::chrono::microseconds delay_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  uint64_t next_ticket_ = 1, finished_ = 0, last_to_device_ = 0, runs_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace een
