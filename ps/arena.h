// Arena: one page-aligned, mmap'ed block that holds every shard of a PS
// (parameter values and optimizer state), so the whole of it can be
// registered with a transport device (an RDMA NIC) once. Regions are handed
// out 64-byte aligned and zero-filled; nothing is freed before the arena.
// A shared arena lives in POSIX shared memory (/dev/shm/een-PID-R-arena-N,
// unlinked with the arena), so the shm transport can hand out views of it
// to workers on the same host without copying (ShmDevice::RegisterMemory).
// Thread safety: Allocate() from one thread; the memory itself is the
// caller's to synchronise.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "common/transport/shm/shm_memory.h"

namespace een::ps {

class Arena {
 public:
  static Result<Arena> Create(size_t bytes, bool shared = false);
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  ~Arena();

  // `floats` zeroed floats, 64-byte aligned; nullptr when the arena is full.
  float* Allocate(size_t floats);
  void* data() const { return base_; }
  size_t size() const { return size_; }
  // Bytes Allocate() needs for `floats` (with alignment).
  static size_t BytesFor(size_t floats);

 private:
  Arena(void* base, size_t size, std::unique_ptr<transport::SharedMemory> shared)
      : base_(base), shared_(std::move(shared)), size_(size) {}
  void* base_ = nullptr;
  std::unique_ptr<transport::SharedMemory> shared_;  // shared arenas own their memory here
  size_t size_ = 0;
  size_t used_ = 0;
};

}  // namespace een::ps
