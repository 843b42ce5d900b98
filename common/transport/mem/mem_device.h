// MemDevice: the in-process backend ("mem://NAME"), for unit tests that run
// several roles as threads of one process. Messages move between queues
// without copying a byte; a Listener's name is unique while it lives.
// Sending to a Listener that does not exist (or no longer does) is Unavailable.
// Thread safety: as in device.h and connection.h.
#pragma once

#include <memory>

#include "common/transport/device.h"

namespace een::transport {

class MemHub;

class MemDevice : public Device {
 public:
  MemDevice();
  ~MemDevice() override;
  std::string name() const override { return "in-process"; }
  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override;
  Result<std::unique_ptr<Connection>> Connect(const std::string& address) override;
  Result<MemoryRegion> RegisterMemory(void* data, size_t size) override;

 private:
  std::shared_ptr<MemHub> hub_;
};

}  // namespace een::transport
