// DeviceCopies over LibTorch's device-generic streams and events
// (c10::Stream, c10::Event, c10::impl::VirtualGuardImpl): CUDA's at run time,
// with nothing CUDA-specific at build time, so it compiles against any
// LibTorch. Copies are tensor copies (copy_ with non_blocking) under a
// StreamGuard: into pinned (cudaHostRegister'ed) host memory they are
// asynchronous; dtype conversion (bf16/fp16 <-> float32) happens on the
// device, on the copy's stream.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/version.h>

#include <thread>

#include "een/error.h"
#include "worker/device/device_copies.h"

namespace een {

namespace {

// Host wait for an event: c10::Event::synchronize() where LibTorch has it
// (2.x), else polling query().
void HostWait(c10::Event& event) {
#if TORCH_VERSION_MAJOR >= 2
  event.synchronize();
#else
  while (!event.query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
#endif
}

class TorchPending : public DeviceCopies::Pending {
 public:
  TorchPending(at::Tensor source, c10::Event done)
      : source_(std::move(source)), done_(std::move(done)) {}
  bool Done() override { return done_.query(); }
  void Wait() override { HostWait(done_); }

 private:
  at::Tensor source_;  // held until the copy completed
  c10::Event done_;
};

class TorchDeviceCopies : public DeviceCopies {
 public:
  explicit TorchDeviceCopies(const c10::Device& device)
      : device_(device),
        impl_(device.type()),
        to_host_(impl_.getStreamFromGlobalPool(device)),
        to_device_(impl_.getStreamFromGlobalPool(device)),
        to_device_done_(device.type()) {}

  std::unique_ptr<Pending> ToHost(const at::Tensor& source, float* dest) override {
    After(impl_.getStream(device_), to_host_);
    {
      c10::StreamGuard on(to_host_);
      at::from_blob(dest, {source.numel()}, at::kFloat)
          .copy_(source.reshape({-1}), /*non_blocking=*/true);
    }
    // The allocator keeps the source's memory until this stream's work is
    // done, even if every reference goes first (the Pending holds one too).
    impl_.recordDataPtrOnStream(source.storage().data_ptr(), to_host_);
    c10::Event done(device_.type());
    done.record(to_host_);
    return std::make_unique<TorchPending>(source, std::move(done));
  }

  void ToDevice(const float* source, const at::Tensor& dest) override {
    if (!to_device_open_) {  // the first copy of a pull: after the queued reads of `dest`
      After(impl_.getStream(device_), to_device_);
      to_device_open_ = true;
    }
    c10::StreamGuard on(to_device_);
    at::NoGradGuard no_grad;
    dest.copy_(at::from_blob(const_cast<float*>(source), dest.sizes(), at::kFloat),
               /*non_blocking=*/true);
  }

  void FenceCurrentStream() override {
    if (!to_device_open_) return;
    to_device_done_ = c10::Event(device_.type());
    to_device_done_.record(to_device_);
    to_device_done_.block(impl_.getStream(device_));
    to_device_open_ = false;
    fenced_ = true;
  }

  void WaitToDevice() override {
    if (fenced_) HostWait(to_device_done_);
  }

 private:
  // `waiter` runs what is queued next only after what `first` has queued so far.
  void After(const c10::Stream& first, const c10::Stream& waiter) {
    c10::Event ready(device_.type());
    ready.record(first);
    ready.block(waiter);
  }

  c10::Device device_;
  c10::impl::VirtualGuardImpl impl_;
  c10::Stream to_host_, to_device_;
  c10::Event to_device_done_;
  bool to_device_open_ = false, fenced_ = false;
};

}  // namespace

std::unique_ptr<DeviceCopies> MakeDeviceCopies(const c10::Device& device) {
  if (device.is_cpu()) throw Error("een: MakeDeviceCopies: CPU tensors need no staging");
  try {
    return std::make_unique<TorchDeviceCopies>(device);
  } catch (const c10::Error& e) {
    throw Error("een: this LibTorch cannot run copies on " + device.str() +
                " (no streams and events for it: " + e.what_without_backtrace() +
                "); parameters on a GPU need a CUDA LibTorch");
  }
}

}  // namespace een
