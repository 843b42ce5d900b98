#include "common/transport/zmq/zmq_parts.h"

#include <cstring>
#include <new>
#include <string>

namespace een::transport {

void FrameAssembler::Add(Frame part, std::vector<Frame>* frames) {
  if (!error_.ok()) return;  // the message is refused: its other parts are only consumed
  if (part.size() == kMaxPart) {
    if ((pending_.size() + 1) * kMaxPart > kMaxFrame) {
      pending_.clear();
      error_ = InvalidArgument("a peer sent a frame of over " + std::to_string(kMaxFrame) +
                               " bytes; the message is refused");
      return;
    }
    pending_.push_back(std::move(part));
    return;
  }
  if (pending_.empty()) {
    frames->push_back(std::move(part));
    return;
  }
  const size_t total = pending_.size() * kMaxPart + part.size();
  pending_.push_back(std::move(part));
  WritableFrame whole;
  try {
    whole = NewHeapFrame(total);
  } catch (const std::bad_alloc&) {
    pending_.clear();
    error_ = ResourceExhausted("no memory for a received frame of " + std::to_string(total) +
                               " bytes; the message is refused");
    return;
  }
  size_t at = 0;
  for (const Frame& p : pending_) {
    if (p.size() > 0) std::memcpy(whole.data + at, p.data(), p.size());
    at += p.size();
  }
  pending_.clear();
  frames->push_back(std::move(whole.frame));
}

Status FrameAssembler::Finish() {
  if (error_.ok() && !pending_.empty()) {
    pending_.clear();
    error_ = InvalidArgument("a peer's message ended inside a frame (its last part was " +
                             std::to_string(kMaxPart) + " bytes); the message is refused");
  }
  return error_;
}

}  // namespace een::transport
