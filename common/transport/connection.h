// Connection and Listener: message exchange between two kinds of peers.
//
// A Listener is bound to an address and talks to many peers, each named by
// the PeerId under which its messages arrived. A Connection is the other
// end: connected to one Listener's address. Both move whole Messages (header
// plus payload frames) and know nothing of what the bytes mean.
//
// Errors are values: Receive() answers DeadlineExceeded when nothing arrived
// in time, Unavailable when the peer or the endpoint is gone.
// Thread safety: one thread at a time per object (like a ZeroMQ socket);
// distinct objects may be used from distinct threads freely.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"
#include "common/transport/frame.h"

namespace een::transport {

using PeerId = std::string;

struct Envelope {
  PeerId from;
  Message message;
  // The identity the sender's connection authenticated as (auth.h), or
  // empty when this process runs without credentials.
  std::string authenticated;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual Status Send(Message message) = 0;
  virtual Result<Message> Receive(std::chrono::milliseconds timeout) = 0;
  virtual const std::string& address() const = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // The address peers connect to (with any wildcard port resolved).
  virtual const std::string& address() const = 0;
  virtual Result<Envelope> Receive(std::chrono::milliseconds timeout) = 0;
  virtual Status Send(const PeerId& to, Message message) = 0;
  // The ZeroMQ socket that becomes readable when a message waits, for
  // waiting on several listeners at once (registry.h ListenOnAll); null
  // for a backend without one.
  virtual void* poll_socket() const { return nullptr; }
  // A frame of `size` bytes to fill and then send to any number of peers,
  // in memory this listener sends without copying when it can (shm: one of
  // its blocks, which every peer reads in place); else heap memory.
  virtual Result<WritableFrame> NewFrame(size_t size) { return NewHeapFrame(size); }
  // Whether NewFrame gives frames sent without copying.
  virtual bool sends_new_frames_in_place() const { return false; }
};

}  // namespace een::transport
