// ListenerSet: one Listener over several, each bound to its own address (a
// PS listening on tcp for other hosts and on shm for its own host). A
// message is received from whichever listener has one first (zmq_poll on
// their sockets, so waiting costs no latency), and its PeerId carries the
// listener it came through, so a reply goes back the same way.
// address() is the first listener's. Every listener must be ZeroMQ-based
// (Listener::poll_socket() not null): the registry makes sure.
// Thread safety: as in connection.h (one thread at a time).
#pragma once

#include <memory>
#include <vector>

#include "common/transport/connection.h"

namespace een::transport {

std::unique_ptr<Listener> MakeListenerSet(std::vector<std::unique_ptr<Listener>> listeners);

}  // namespace een::transport
