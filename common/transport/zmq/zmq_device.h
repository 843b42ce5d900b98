// ZmqDevice: the ZeroMQ backend (tcp and ipc). Listeners are ROUTER sockets,
// Connections DEALER sockets. Payload frames of 256 bytes or more are sent
// zero-copy (the Frame's owner is held until ZeroMQ has written them); received
// frames are handed out without copying. Memory registration records the range
// only. EEN_SOCKET_BUFFER=BYTES fixes the kernel socket buffers (capped by
// net.core.wmem_max/rmem_max); by default the kernel autotunes them. Thread safety: as in device.h
// and connection.h.
#pragma once

#include <memory>

#include "common/transport/device.h"

namespace een::transport {

class ZmqDevice : public Device {
 public:
  ZmqDevice();
  ~ZmqDevice() override;
  std::string name() const override { return "zeromq"; }
  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override;
  Result<std::unique_ptr<Connection>> Connect(const std::string& address) override;
  Result<MemoryRegion> RegisterMemory(void* data, size_t size) override;

 private:
  void* context_;  // zmq context, shared by every socket of this device
};

}  // namespace een::transport
