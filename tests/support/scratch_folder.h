// ScratchFolder: a test's own folder, /tmp/een-NAME-PID, empty when it is
// made and removed with everything in it when it goes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace een::testing {

class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& name)
      : path_("/tmp/een-" + name + "-" + std::to_string(getpid())) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace een::testing
