// GradientStager: the gradients of a model on a device, staged into the
// host buckets they are pushed from while backward goes on.
//
// Stage(t, grad) is called from the gradient hook: it queues one
// device-to-host copy per segment of tensor t (bucket_layout.h) into its
// place in the buckets and returns at once. A completer thread of its own
// waits for each tensor's copies in the order they were staged (one copy
// stream: they complete in that order) and then calls `arrived(t)`, which
// pushes every bucket t completes; so a bucket goes out as soon as all its
// copies have completed, and the copies overlap the rest of backward. The
// copies hold their gradients until done (DeviceCopies::Pending).
// Drain() blocks until every staged tensor has arrived (Step() calls it
// before it pushes what is left; never while holding a lock `arrived`
// takes) and rethrows what `arrived` threw. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/bucket_layout.h"
#include "worker/device/device_copies.h"

namespace een {

class GradientStager {
 public:
  GradientStager(const BucketLayout& layout, std::vector<float*> buckets, DeviceCopies& copies,
                 std::function<void(uint32_t)> arrived);
  ~GradientStager();  // drains (errors are dropped) and stops the thread
  GradientStager(const GradientStager&) = delete;
  GradientStager& operator=(const GradientStager&) = delete;

  // `grad`: tensor t's gradient on the device (its shape; any floating dtype).
  void Stage(uint32_t t, const at::Tensor& grad);
  void Drain();
  size_t in_flight() const;  // staged, not yet arrived

 private:
  struct Staged {
    uint32_t tensor;
    std::vector<std::unique_ptr<DeviceCopies::Pending>> copies;
  };
  void Loop();

  const BucketLayout& layout_;
  const std::vector<float*> buckets_;
  DeviceCopies& copies_;
  const std::function<void(uint32_t)> arrived_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Staged> queue_;
  size_t in_flight_ = 0;  // queued or being completed
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace een
