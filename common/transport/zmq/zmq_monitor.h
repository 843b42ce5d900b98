// HandshakeMonitor: a ZeroMQ socket's handshake outcomes (zmq_socket_monitor),
// so a connection whose peer refuses its credentials fails with that reason
// instead of waiting forever, and a listener can log peers it refused.
// Thread safety: one thread at a time, like the socket it watches.
#pragma once

#include <string>
#include <vector>

namespace een::transport {

class HandshakeMonitor {
 public:
  HandshakeMonitor(void* context, void* socket);
  ~HandshakeMonitor();
  HandshakeMonitor(const HandshakeMonitor&) = delete;
  HandshakeMonitor& operator=(const HandshakeMonitor&) = delete;

  struct Event {
    bool succeeded = false;
    bool auth = false;  // failed: the peer's credentials were refused (else: no common mechanism)
    std::string address;
  };
  // The events since the last call, oldest first (never blocks).
  std::vector<Event> Drain();

 private:
  void* pair_ = nullptr;  // receives the monitor's events
};

}  // namespace een::transport
