// Device: a transport backend. It creates Listeners and Connections for the
// addresses of its scheme, registers memory for zero-copy access and
// allocates memory it can send without a copy. Roles get a device from the
// registry (registry.h) by address and never name a backend.
//
// Schemes: "tcp://host:port" and "ipc:///path" (ZeroMQ), "shm:///path"
// (same host: payloads through shared memory, shm_device.h), "mem://name"
// (in-process, for unit tests). A tcp port of "*" or 0 picks a free port;
// Listener::address() tells which.
// Thread safety: Device methods may be called from any thread concurrently.
// Every Listener, Connection and MemoryRegion must be destroyed before the
// Device that made it; RegisteredMemory may outlive it (at exit: its
// registration then lapses, the memory is still freed).
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
  // `bytes` (rounded up to whole pages) of zero-filled memory, registered
  // with this device, that frames pointing into it are sent from without a
  // copy where the backend can. `tag` names it in /dev/shm listings. The
  // default maps anonymous memory and registers it. ResourceExhausted when
  // the memory cannot be had (never a fault later).
  virtual Result<RegisteredMemory> Allocate(size_t bytes, const std::string& tag);
};

// Zero-filled anonymous memory registered with no device (its region only
// records the range): for a PS arena with no data plane (tests, tools).
Result<RegisteredMemory> AllocatePlain(size_t bytes, const std::string& tag);

// What a device's connections carry. Heartbeats get devices of their own
// (for ZeroMQ: a context with its own I/O thread), so they never wait
// behind a payload or a burst of control messages in a busy process.
enum class Lane { kDefault, kHeartbeat };

}  // namespace een::transport
