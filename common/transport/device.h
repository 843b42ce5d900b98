// Device: a transport backend. It creates Listeners and Connections for the
// addresses of its scheme and registers memory for zero-copy access.
//
// Schemes: "tcp://host:port" and "ipc:///path" (ZeroMQ), "shm:///path"
// (same host: payloads through shared memory, shm_device.h), "mem://name"
// (in-process, for unit tests). A tcp port of "*" or 0 picks a free port;
// Listener::address() tells which.
// Thread safety: Device methods may be called from any thread concurrently.
// Every Listener, Connection and MemoryRegion must be destroyed before the
// Device that made it.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "common/transport/connection.h"
#include "common/transport/memory_region.h"

namespace een::transport {

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual Result<std::unique_ptr<Listener>> Listen(const std::string& address) = 0;
  virtual Result<std::unique_ptr<Connection>> Connect(const std::string& address) = 0;
  virtual Result<MemoryRegion> RegisterMemory(void* data, size_t size) = 0;
};

// What a device's connections carry. Heartbeats get devices of their own
// (for ZeroMQ: a context with its own I/O thread), so they never wait
// behind a payload or a burst of control messages in a busy process.
enum class Lane { kDefault, kHeartbeat };

// The process-wide device serving `address`'s scheme on `lane`; created on
// first use (after any fork()). Unknown schemes are InvalidArgument.
Result<Device*> DeviceFor(const std::string& address, Lane lane = Lane::kDefault);

}  // namespace een::transport
