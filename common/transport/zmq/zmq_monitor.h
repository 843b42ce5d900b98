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

  // A failure is definitive only when the credentials were refused (`auth`)
  // or the two sides have no mechanism in common (`mismatch`); any other
  // (a peer that died mid-handshake, a restart) is transient: reconnecting
  // may succeed.
  struct Event {
    bool succeeded = false;
    bool auth = false;
    bool mismatch = false;
    // A CURVE listener could not open the peer's handshake: the peer does
    // not know the job's server key (not this job's secret).
    bool crypto = false;
    // The peer ended the handshake without saying why (what a CURVE client
    // with another job's secret sees; also a peer that died mid-handshake).
    bool dropped = false;
    std::string address;
  };
  // The events since the last call, oldest first (never blocks).
  std::vector<Event> Drain();

 private:
  void* pair_ = nullptr;  // receives the monitor's events
};

}  // namespace een::transport
