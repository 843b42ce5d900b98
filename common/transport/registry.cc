#include "common/transport/registry.h"

#include <array>

#include "common/transport/mem/mem_device.h"
#include "common/transport/rdma/rdma_probe.h"
#include "common/transport/shm/shm_device.h"
#include "common/transport/zmq/zmq_device.h"
#include "common/transport/zmq/zmq_listener_set.h"

namespace een::transport {
namespace {

// One row per scheme. Listen addresses: "ipc" and "shm" are sockets in
// the run folder, "mem" a name in the process, "tcp" a free port.
struct Backend {
  const char* scheme;
  bool tests_only;   // not offered to users (in-process)
  bool socket_file;  // listens on a socket under the run folder
  bool in_place;     // sends frames in Allocate()d memory without a copy
  Device* (*device)(Lane lane);
};

Device* Zmq(Lane lane) {
  if (lane == Lane::kHeartbeat) {
    static ZmqDevice* heartbeats = new ZmqDevice();  // lives for the process
    return heartbeats;
  }
  static ZmqDevice* zmq = new ZmqDevice();  // lives for the process
  return zmq;
}

Device* Shm(Lane) {
  static ShmDevice shm;  // destroyed at exit: its blocks are unlinked then
  return &shm;
}

Device* Mem(Lane) {
  static MemDevice* mem = new MemDevice();  // lives for the process
  return mem;
}

constexpr std::array<Backend, 4> kBackends{{
    {"tcp", false, false, false, Zmq},
    {"ipc", false, true, false, Zmq},
    {"shm", false, true, true, Shm},
    {"mem", true, false, false, Mem},
}};

const Backend* Find(const std::string& scheme) {
  for (const Backend& b : kBackends) {
    if (scheme == b.scheme) return &b;
  }
  return nullptr;
}

const Backend* OfAddress(const std::string& address) {
  const size_t colon = address.find("://");
  return colon == std::string::npos ? nullptr : Find(address.substr(0, colon));
}

std::string Names(bool tests_too) {
  std::string names;
  for (const Backend& b : kBackends) {
    if (b.tests_only && !tests_too) continue;
    names += (names.empty() ? "" : ", ") + std::string(b.scheme);
  }
  return names + ", " + kPerPair;
}

}  // namespace

Result<Device*> DeviceFor(const std::string& address, Lane lane) {
  const Backend* b = OfAddress(address);
  if (!b) {
    return InvalidArgument("address '" + address +
                           "' has no known scheme; use tcp://HOST:PORT, ipc:///PATH, shm:///PATH "
                           "or mem://NAME");
  }
  return b->device(lane);
}

Status CheckTransport(const std::string& transport, const std::string& what, bool tests_too) {
  const Backend* b = Find(transport);
  if (transport == kPerPair || (b && (tests_too || !b->tests_only))) return Status::Ok();
  return InvalidArgument(what + " '" + transport + "' is not one of " + Names(tests_too));
}

std::vector<std::string> ListenAddresses(const std::string& transport, const std::string& host,
                                         const std::string& run_dir, const std::string& name) {
  if (transport == kPerPair) {
    return {ListenAddress("tcp", host, run_dir, name), ListenAddress("shm", host, run_dir, name)};
  }
  return {ListenAddress(transport, host, run_dir, name)};
}

std::string ListenAddress(const std::string& transport, const std::string& host,
                          const std::string& run_dir, const std::string& name) {
  const Backend* b = Find(transport);
  if (b && b->socket_file) return transport + "://" + run_dir + "/een-" + name + ".sock";
  if (b && b->tests_only) return transport + "://" + run_dir + "/" + name;
  return "tcp://" + host + ":0";
}

Result<std::unique_ptr<Listener>> ListenOnAll(const std::vector<std::string>& addresses) {
  if (addresses.empty()) return InvalidArgument("no address to listen on");
  std::vector<std::unique_ptr<Listener>> listeners;
  for (const std::string& address : addresses) {
    EEN_ASSIGN_OR_RETURN(Device * device, DeviceFor(address));
    EEN_ASSIGN_OR_RETURN(auto listener, device->Listen(address));
    if (addresses.size() > 1 && !listener->poll_socket()) {
      return InvalidArgument(address + " cannot be listened on together with other addresses");
    }
    listeners.push_back(std::move(listener));
  }
  if (listeners.size() == 1) return std::move(listeners[0]);
  return MakeListenerSet(std::move(listeners));
}

bool SendsInPlace(const std::string& address) {
  const Backend* b = OfAddress(address);
  return b && b->in_place;
}

void RemoveLeftoversOf(pid_t pid) { RemoveShmBlocksOf(pid); }

std::string DescribeHardware() { return DescribeRdmaDevices(); }

}  // namespace een::transport
