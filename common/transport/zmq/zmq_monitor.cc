#include "common/transport/zmq/zmq_monitor.h"

#include <zmq.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace een::transport {

HandshakeMonitor::HandshakeMonitor(void* context, void* socket) {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint = "inproc://een-handshake-monitor-" + std::to_string(next++);
  const int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  if (zmq_socket_monitor(socket, endpoint.c_str(), events) != 0) return;
  pair_ = zmq_socket(context, ZMQ_PAIR);
  if (pair_ && zmq_connect(pair_, endpoint.c_str()) != 0) {
    zmq_close(pair_);
    pair_ = nullptr;
  }
}

HandshakeMonitor::~HandshakeMonitor() {
  if (pair_) zmq_close(pair_);
}

std::vector<HandshakeMonitor::Event> HandshakeMonitor::Drain() {
  std::vector<Event> out;
  if (!pair_) return out;
  while (true) {
    // Two frames: event number (uint16) and value (uint32), then the address.
    zmq_msg_t head, address;
    zmq_msg_init(&head);
    if (zmq_msg_recv(&head, pair_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&head);
      return out;
    }
    uint16_t event = 0;
    uint32_t value = 0;
    if (zmq_msg_size(&head) >= sizeof event + sizeof value) {
      std::memcpy(&event, zmq_msg_data(&head), sizeof event);
      std::memcpy(&value, static_cast<const char*>(zmq_msg_data(&head)) + sizeof event,
                  sizeof value);
    }
    const bool more = zmq_msg_more(&head);
    zmq_msg_close(&head);
    Event e;
    if (more) {
      zmq_msg_init(&address);
      if (zmq_msg_recv(&address, pair_, 0) >= 0) {
        e.address.assign(static_cast<const char*>(zmq_msg_data(&address)), zmq_msg_size(&address));
      }
      zmq_msg_close(&address);
    }
    e.succeeded = event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    e.auth = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    e.mismatch = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                 value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
    e.crypto = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
               value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC;
    e.dropped = event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    out.push_back(std::move(e));
  }
}

}  // namespace een::transport
