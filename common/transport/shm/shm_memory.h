// SharedMemory: a zero-filled, page-aligned block in a POSIX shared-memory
// file (/dev/shm/een-PID-R-TAG-N, R random per process), reserved in full
// (a full /dev/shm is ResourceExhausted here, never SIGBUS later), unlinked
// and unmapped when destroyed. Memory
// registered with the shm transport that lives in such a block is sent
// without copying (shm_device.h); PS arenas and worker gradient buckets use
// it when the data plane is shm. een-launch removes the files of a process
// that died (RemoveShmBlocksOf matches the same een-PID- prefix).
// Thread safety: a plain owner of memory; the bytes are the caller's to share.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace een::transport {

class SharedMemory {
 public:
  static Result<std::unique_ptr<SharedMemory>> Create(size_t bytes, const std::string& tag);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }  // "/een-..."; shm_open opens it

 private:
  SharedMemory(void* data, size_t size, std::string name)
      : data_(data), size_(size), name_(std::move(name)) {}
  void* data_;
  size_t size_;
  std::string name_;
};

}  // namespace een::transport
