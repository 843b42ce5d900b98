// MemoryRegion: a range of memory registered with a transport device.
//
// Registration pins memory for devices that read or write it directly (RDMA
// NICs); on ZeroMQ and the in-process backend it only records the range.
// The registered memory must outlive the region; the region is unregistered
// when the last copy is destroyed. Safe to share between threads read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace een::transport {

class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(void* data, size_t size, uint32_t remote_key, std::shared_ptr<void> registration)
      : data_(data), size_(size), remote_key_(remote_key), registration_(std::move(registration)) {}

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // The key a remote peer needs to access this region (0 where meaningless).
  uint32_t remote_key() const { return remote_key_; }
  bool contains(const void* p, size_t n) const {
    auto* b = static_cast<const std::byte*>(data_);
    auto* q = static_cast<const std::byte*>(p);
    return q >= b && q + n <= b + size_;
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  uint32_t remote_key_ = 0;
  std::shared_ptr<void> registration_;  // backend handle; released on destruction
};

// RegisteredMemory: zero-filled, page-aligned memory a device allocated for
// sending without a copy (Device::Allocate): a /dev/shm block with the shm
// transport, pinned memory with RDMA, plain anonymous memory otherwise. It
// owns the bytes; the registration is released before they are unmapped.
// Movable; safe to share between threads read-only.
class RegisteredMemory {
 public:
  RegisteredMemory() = default;
  RegisteredMemory(std::shared_ptr<void> memory, MemoryRegion region)
      : memory_(std::move(memory)), region_(std::move(region)) {}
  RegisteredMemory(RegisteredMemory&& other) noexcept
      : memory_(std::move(other.memory_)), region_(std::exchange(other.region_, MemoryRegion())) {}
  RegisteredMemory& operator=(RegisteredMemory&& other) noexcept {
    region_ = std::exchange(other.region_, MemoryRegion());  // the old one goes before its memory
    memory_ = std::move(other.memory_);
    return *this;
  }
  ~RegisteredMemory() { region_ = MemoryRegion(); }

  void* data() const { return region_.data(); }
  size_t size() const { return region_.size(); }
  const MemoryRegion& region() const { return region_; }

 private:
  std::shared_ptr<void> memory_;  // owns the bytes (declared first: destroyed last)
  MemoryRegion region_;
};

}  // namespace een::transport
