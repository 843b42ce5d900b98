#include "common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace een {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

Result<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                  size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO nobody writes must not wait.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return FailedPrecondition("cannot read " + what + " " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return FailedPrecondition("cannot read " + what + " " + path + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument(what + " " + path + " is " + KindOf(st.st_mode) +
                           ", not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    close(fd);
    return InvalidArgument(what + " " + path + " has " + std::to_string(st.st_size) +
                           " bytes; at most " + std::to_string(max_bytes) + " are read");
  }
  std::string text;
  char buffer[65536];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      close(fd);
      return FailedPrecondition("cannot read " + what + " " + path + ": " + std::strerror(e));
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes) {  // it grew while read
      close(fd);
      return InvalidArgument(what + " " + path + " has more than " + std::to_string(max_bytes) +
                             " bytes; at most that many are read");
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

}  // namespace een
