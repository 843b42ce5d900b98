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

}  // namespace een::transport
