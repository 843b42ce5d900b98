// Fuzz inputs that stand for a transport Message (the header frame first,
// then payload frames), and back, for the seed writer.
// Layout: per frame a 4-byte little-endian length, then that many bytes; a
// length beyond what is left takes the rest; at most kMaxFrames frames.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/transport/frame.h"

namespace een::fuzz {

constexpr size_t kMaxFrames = 8;

inline transport::Message MessageOf(const uint8_t* data, size_t size) {
  transport::Message m;
  size_t at = 0;
  while (at < size && m.frames.size() < kMaxFrames) {
    uint32_t length = 0;
    const size_t head = size - at < 4 ? size - at : 4;
    std::memcpy(&length, data + at, head);
    at += head;
    const size_t take = length < size - at ? length : size - at;
    m.frames.push_back(transport::Frame::Copy(data + at, take));
    at += take;
  }
  return m;
}

inline std::vector<uint8_t> BytesOf(const transport::Message& m) {
  std::vector<uint8_t> out;
  for (const auto& f : m.frames) {
    const uint32_t length = static_cast<uint32_t>(f.size());
    const auto* l = reinterpret_cast<const uint8_t*>(&length);
    out.insert(out.end(), l, l + 4);
    const auto* b = reinterpret_cast<const uint8_t*>(f.data());
    out.insert(out.end(), b, b + f.size());
  }
  return out;
}

}  // namespace een::fuzz
