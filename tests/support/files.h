// Small file helpers for tests.
#pragma once

#include <cstring>
#include <fstream>
#include <ios>
#include <iterator>
#include <string>
#include <vector>

namespace een::testing {

// The whole file as bytes ("" if it cannot be read, as when a /proc/PID
// file's process ends while it is read: libstdc++ then throws from the
// stream buffer, "error reading the file: No such process").
inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  try {
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure&) {
    return "";
  }
}

// Bytes as the float32 values a trainer wrote (whole floats only).
inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// A file of float32 values (empty if it cannot be read).
inline std::vector<float> ReadFloats(const std::string& path) { return Floats(ReadBytes(path)); }

}  // namespace een::testing
