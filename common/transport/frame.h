// Frame and Message: the unit the transport moves.
//
// A Frame is an immutable byte range plus a shared owner that keeps the bytes
// alive; copying a Frame never copies bytes. Frames built with Borrow() send
// zero-copy: the caller promises the bytes stay valid and unchanged while any
// copy of the Frame (including one held inside the transport) exists.
// A Message is a header frame (frames[0], a Cap'n Proto `Header`) followed by
// raw payload frames. Frames are safe to share between threads read-only.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace een::transport {

class Frame {
 public:
  Frame() = default;

  // Owns a private copy of `size` bytes at `data`.
  static Frame Copy(const void* data, size_t size);
  // Takes ownership of `bytes`.
  static Frame Own(std::vector<std::byte> bytes);
  // Refers to `data` without copying; `owner` keeps it alive.
  static Frame Borrow(const void* data, size_t size, std::shared_ptr<const void> owner) {
    Frame f;
    f.data_ = static_cast<const std::byte*>(data);
    f.size_ = size;
    f.owner_ = std::move(owner);
    return f;
  }

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  std::string ToString() const { return std::string(reinterpret_cast<const char*>(data_), size_); }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

struct Message {
  std::vector<Frame> frames;  // frames[0] is the header

  size_t payload_count() const { return frames.empty() ? 0 : frames.size() - 1; }
  const Frame& payload(size_t i) const { return frames[i + 1]; }
  size_t payload_bytes() const {
    size_t total = 0;
    for (size_t i = 1; i < frames.size(); ++i) total += frames[i].size();
    return total;
  }
};

// A new frame whose bytes the caller fills before sending it: `data` may be
// written until the first copy of `frame` is sent or shared, never after.
struct WritableFrame {
  std::byte* data = nullptr;
  Frame frame;
};
// `size` bytes of heap memory, not zeroed.
WritableFrame NewHeapFrame(size_t size);

}  // namespace een::transport
