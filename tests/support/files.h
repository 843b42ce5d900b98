// Small file helpers for tests.
#pragma once

#include <fstream>
#include <ios>
#include <iterator>
#include <string>

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

}  // namespace een::testing
