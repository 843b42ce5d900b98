// Arena: one page-aligned block that holds shards of a PS (parameter values
// and optimizer state), allocated by the data plane's transport device
// (Device::Allocate) so the whole of it is registered once and pulls are
// answered from it without a copy where the backend can (shared memory
// now, an RDMA NIC later). Without a device (unit tests, tools) it is plain
// anonymous memory. Regions are handed out 64-byte aligned and zero-filled;
// nothing is freed before the arena.
// Thread safety: Allocate() from one thread; the memory itself is the
// caller's to synchronise.
#pragma once

#include <cstddef>
#include <utility>

#include "common/status.h"
#include "common/transport/device.h"

namespace een::ps {

class Arena {
 public:
  // `device`: the data plane's device, or nullptr for unregistered memory.
  static Result<Arena> Create(size_t bytes, transport::Device* device = nullptr);
  Arena(Arena&& other) noexcept
      : memory_(std::move(other.memory_)), used_(std::exchange(other.used_, 0)) {}
  Arena& operator=(Arena&& other) noexcept {
    memory_ = std::move(other.memory_);
    used_ = std::exchange(other.used_, 0);
    return *this;
  }
  Arena(const Arena&) = delete;

  // `floats` zeroed floats, 64-byte aligned; nullptr when the arena is full.
  float* Allocate(size_t floats);
  void* data() const { return memory_.data(); }
  size_t size() const { return memory_.size(); }
  // Bytes Allocate() needs for `floats` (with alignment).
  static size_t BytesFor(size_t floats);

 private:
  explicit Arena(transport::RegisteredMemory memory) : memory_(std::move(memory)) {}
  transport::RegisteredMemory memory_;
  size_t used_ = 0;
};

}  // namespace een::ps
