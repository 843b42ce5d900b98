// The shm transport's manifest: the last frame of every message, saying for
// each frame whether it travels inline, copied into one of the sender's
// blocks (name, size), or in place in the sender's registered shared memory
// (name, offset, size). Pack() moves frames out of the message, Unpack()
// puts views of the shared memory back in their place.
#pragma once

#include <vector>

#include "common/transport/frame.h"
#include "common/transport/shm/shm_segments.h"

namespace een::transport::shm {

// Packs one message; if it is never sent (Sent() not called), the blocks it
// took or shared are let go when the Packer goes.
class Packer {
 public:
  Packer(Blocks& blocks, Regions& regions) : blocks_(blocks), regions_(regions) {}
  ~Packer();
  Status Pack(Message& m);
  void Sent() { sent_ = true; }

 private:
  Blocks& blocks_;
  Regions& regions_;
  std::vector<Blocks::Block*> taken_;
  bool sent_ = false;
};

// InvalidArgument for a missing or malformed manifest (a peer that is not an
// EEN shm endpoint), Unavailable when a named segment cannot be mapped.
Status Unpack(Mappings& mappings, std::vector<Frame>& frames);

}  // namespace een::transport::shm
