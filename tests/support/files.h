// Small file helpers for tests.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace een::testing {

// The whole file as bytes ("" if it cannot be read).
inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace een::testing
