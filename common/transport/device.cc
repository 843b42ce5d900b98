#include "common/transport/device.h"

#include "common/transport/mem/mem_device.h"
#include "common/transport/shm/shm_device.h"
#include "common/transport/zmq/zmq_device.h"

namespace een::transport {

Result<Device*> DeviceFor(const std::string& address, Lane lane) {
  if (address.rfind("tcp://", 0) == 0 || address.rfind("ipc://", 0) == 0) {
    if (lane == Lane::kHeartbeat) {
      static ZmqDevice* heartbeats = new ZmqDevice();  // lives for the process
      return static_cast<Device*>(heartbeats);
    }
    static ZmqDevice* zmq = new ZmqDevice();  // lives for the process
    return static_cast<Device*>(zmq);
  }
  if (address.rfind("shm://", 0) == 0) {
    static ShmDevice shm;  // destroyed at exit: its blocks are unlinked then
    return static_cast<Device*>(&shm);
  }
  if (address.rfind("mem://", 0) == 0) {
    static MemDevice* mem = new MemDevice();
    return static_cast<Device*>(mem);
  }
  return InvalidArgument("address '" + address +
                         "' has no known scheme; use tcp://HOST:PORT, ipc:///PATH, shm:///PATH or mem://NAME");
}

}  // namespace een::transport
