// ShmDevice: roles on one host exchange payloads through shared memory.
//
// Addresses are "shm:///PATH": messages travel over a ZeroMQ ipc socket at
// PATH, but every payload frame of 64 KiB or more is copied once into a
// shared-memory block of the sender (POSIX shm, /dev/shm/een-PID-R-block-N) and only
// its name and size go through the socket; the receiver maps the block and
// hands the frame out without copying. When the receiver drops the frame the
// block lets go of it (a count of holders in the block) and the sender
// reuses it once none holds it, so a steady state allocates nothing and
// faults no pages. A frame made by the listener's NewFrame() lies in a block
// already: it goes to any number of receivers without a copy. Small frames
// go inline. A frame inside memory registered with RegisterMemory() that
// lives in a /dev/shm file (a shared PS arena) is not copied at all: the
// receiver maps the file read-only and reads the bytes in place, which the
// sender must keep unchanged as long as with any zero-copy send. Each
// message carries a last "manifest" frame saying where each frame is; a
// message without a valid one is refused.
// Blocks are unlinked when the process exits normally; een-launch removes
// those of a process that died (RemoveShmBlocksOf, through the registry's
// RemoveLeftoversOf).
// Thread safety: as in device.h and connection.h.
#pragma once

#include <sys/types.h>

#include <memory>

#include "common/transport/device.h"

namespace een::transport {

namespace shm {
class Blocks;
class Regions;
class Mappings;
}  // namespace shm

class ShmDevice : public Device {
 public:
  ShmDevice();
  ~ShmDevice() override;
  std::string name() const override { return "shared memory"; }
  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override;
  Result<std::unique_ptr<Connection>> Connect(const std::string& address) override;
  Result<MemoryRegion> RegisterMemory(void* data, size_t size) override;
  // A /dev/shm block (shm_memory.h), registered: frames in it are sent in place.
  Result<RegisteredMemory> Allocate(size_t bytes, const std::string& tag) override;

 private:
  std::shared_ptr<shm::Blocks> blocks_;      // this process's blocks, as a sender
  std::shared_ptr<shm::Regions> regions_;    // its registered shared memory
  std::shared_ptr<shm::Mappings> mappings_;  // the peers' segments it mapped, as a receiver
};

// Removes the shared-memory blocks a (dead) process `pid` left behind.
void RemoveShmBlocksOf(pid_t pid);

}  // namespace een::transport
