#include "worker/device/fake_device_copies.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/from_blob.h>

#include <cstring>

namespace een {

class FakeDeviceCopies::FakePending : public DeviceCopies::Pending {
 public:
  FakePending(FakeDeviceCopies* owner, uint64_t ticket) : owner_(owner), ticket_(ticket) {}
  bool Done() override { return owner_->Finished(ticket_); }
  void Wait() override { owner_->WaitFor(ticket_); }

 private:
  FakeDeviceCopies* owner_;
  uint64_t ticket_;
};

FakeDeviceCopies::FakeDeviceCopies(Mode mode, std::chrono::microseconds delay)
    : mode_(mode), delay_(delay) {
  if (mode_ == Mode::kThread) thread_ = std::thread([this] { Loop(); });
}

FakeDeviceCopies::~FakeDeviceCopies() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<DeviceCopies::Pending> FakeDeviceCopies::ToHost(const at::Tensor& source,
                                                                float* dest) {
  // The job holds the source, as the real copy's Pending does; it reads it
  // only when it runs.
  at::Tensor held = source;
  const uint64_t ticket = Enqueue([held, dest] {
    at::Tensor values = held.reshape({-1}).to(at::kFloat).contiguous();
    std::memcpy(dest, values.data_ptr<float>(), static_cast<size_t>(values.numel()) * 4);
  });
  return std::make_unique<FakePending>(this, ticket);
}

void FakeDeviceCopies::ToDevice(const float* source, const at::Tensor& dest) {
  at::Tensor held = dest;
  const uint64_t ticket = Enqueue([held, source] {
    at::NoGradGuard no_grad;
    held.copy_(at::from_blob(const_cast<float*>(source), held.sizes(), at::kFloat));
  });
  std::lock_guard<std::mutex> lock(mu_);
  last_to_device_ = ticket;
}

void FakeDeviceCopies::FenceCurrentStream() { WaitToDevice(); }

void FakeDeviceCopies::WaitToDevice() {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = last_to_device_;
  }
  if (ticket != 0) WaitFor(ticket);
}

uint64_t FakeDeviceCopies::Enqueue(std::function<void()> copy) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = next_ticket_++;
    jobs_.push_back({std::move(copy), ticket});
  }
  cv_.notify_all();
  return ticket;
}

bool FakeDeviceCopies::Finished(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ >= ticket;
}

void FakeDeviceCopies::WaitFor(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_ >= ticket; });
}

bool FakeDeviceCopies::RunNext() {
  Job job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.empty()) return false;
    job = std::move(jobs_.front());
    jobs_.pop_front();
  }
  job.copy();
  job.copy = nullptr;  // drops the held tensor before the copy counts as finished
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = job.ticket;
    runs_++;
  }
  cv_.notify_all();
  return true;
}

void FakeDeviceCopies::RunAll() {
  while (RunNext()) {
  }
}

size_t FakeDeviceCopies::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

size_t FakeDeviceCopies::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_;
}

void FakeDeviceCopies::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left
    lock.unlock();
    std::this_thread::sleep_for(delay_);  // the "device" is behind the host
    RunNext();
    lock.lock();
  }
}

}  // namespace een
