// Files a fuzz target reads its input from: a path of this process's own
// under TMPDIR (run_fuzzer.sh points it at /dev/shm), removed with whatever
// is there when the process exits; and writing an input there.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace een::fuzz {

class ScratchPath {
 public:
  explicit ScratchPath(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("een-fuzz-" + std::to_string(getpid()) + "-" + name)) {}
  ~ScratchPath() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteInput(const std::filesystem::path& file, const uint8_t* data, size_t size) {
  std::ofstream out(file, std::ios::trunc | std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace een::fuzz
