// DeviceCopies: the asynchronous copies between a device's tensors and host
// memory through which the worker stages gradients and parameters of a
// model on a GPU (the seam between the staging logic and CUDA).
//
// ToHost() starts copying a gradient into host float32 memory on a side
// stream, ordered after the work already queued on the caller's current
// stream by an event (no device-wide synchronise), and returns a Pending
// that holds the source tensor until the copy has completed (so the caching
// allocator cannot hand its memory to another tensor meanwhile). ToDevice()
// queues a host float32 -> device copy on a copy stream that first waits
// for the current stream's queued work; FenceCurrentStream() makes the
// current stream (the next forward's) wait for every ToDevice() so far,
// through an event, without the host waiting. WaitToDevice() is the host
// waiting for them (before their host memory is written again).
//
// MakeDeviceCopies(device) gives LibTorch's device-generic streams and
// events (CUDA at run time; torch_device_copies.cc). FakeDeviceCopies
// (fake_device_copies.h) stands in for a device in tests, on CPU tensors.
// One instance per device; methods are called from one thread at a time
// except Pending::Wait/Done, which the completer thread calls.
#pragma once

// The narrow headers: this seam needs only the tensor and device types, and
// LibTorch's whole <torch/torch.h> is most of a translation unit's compile time.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>

namespace een {

class DeviceCopies {
 public:
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual bool Done() = 0;  // without blocking
    virtual void Wait() = 0;  // blocks until the copy completed
  };

  virtual ~DeviceCopies() = default;
  // `source`: a contiguous device tensor of any floating dtype; `dest`:
  // host memory for source.numel() floats.
  virtual std::unique_ptr<Pending> ToHost(const at::Tensor& source, float* dest) = 0;
  // `source`: host memory of dest.numel() floats; `dest`: a contiguous device tensor.
  virtual void ToDevice(const float* source, const at::Tensor& dest) = 0;
  virtual void FenceCurrentStream() = 0;
  virtual void WaitToDevice() = 0;
};

// The real copies for `device` (a CUDA device); throws een::Error when this
// LibTorch has no streams and events for its type.
std::unique_ptr<DeviceCopies> MakeDeviceCopies(const c10::Device& device);

}  // namespace een
