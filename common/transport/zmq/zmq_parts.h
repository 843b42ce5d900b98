// How a frame travels as ZeroMQ message parts.
//
// ZeroMQ refuses (and disconnects) a peer that declares a part over
// kMaxPart, before or after authentication: so a peer that has not proved
// it holds the job's credentials can make a process hold at most one part
// per connection, never the 1 GiB it declares. A frame of kMaxPart bytes or
// more travels as consecutive parts: every part but the last is exactly
// kMaxPart bytes, the last is shorter (possibly empty). A part of exactly
// kMaxPart bytes therefore always says "the frame goes on in the next part".
// kMaxPart is above the default chunk (1 MiB of fp32), so a default job's
// frames travel whole and are received without a copy; a larger frame is
// sent without a copy and gathered into one buffer on receipt.
// Thread safety: FrameAssembler is used by one thread; the rest is pure.
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"
#include "common/transport/frame.h"

namespace een::transport {

inline constexpr size_t kMaxPart = (size_t{1} << 20) + (size_t{64} << 10);  // 1 MiB + 64 KiB
// The largest frame a receiver gathers from parts.
inline constexpr size_t kMaxFrame = size_t{1} << 30;

// How many parts a frame of `bytes` travels as (at least 1).
inline size_t PartsOf(size_t bytes) { return bytes / kMaxPart + 1; }

// Gathers one message's parts into frames.
class FrameAssembler {
 public:
  // Takes the next part; a frame it completes is appended to `frames`.
  void Add(Frame part, std::vector<Frame>* frames);
  // After the message's last part: InvalidArgument if the parts did not end
  // a frame or made one over kMaxFrame, ResourceExhausted if its memory
  // could not be had (the message is refused either way).
  Status Finish();

 private:
  std::vector<Frame> pending_;  // parts of a frame not yet ended
  Status error_;
};

}  // namespace een::transport
