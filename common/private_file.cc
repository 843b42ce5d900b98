#include "common/private_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace een {

Status WriteNewPrivateFile(const std::string& path, std::string_view bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    if (e == EEXIST)
      return FailedPrecondition(path + " exists already (a file or a link): not written");
    return Unavailable("cannot create " + path + ": " + std::strerror(e));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlink(path.c_str());
      return Unavailable("cannot write " + path + ": " + std::strerror(e) + " (disk full?)");
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return Unavailable("cannot write " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

Result<std::string> MakePrivateTempFolder(const std::string& prefix) {
  std::vector<char> name(prefix.begin(), prefix.end());
  for (char c : std::string("XXXXXX")) name.push_back(c);
  name.push_back('\0');
  if (!mkdtemp(name.data())) {
    return Unavailable("cannot create a folder " + prefix + "XXXXXX: " + std::strerror(errno));
  }
  return std::string(name.data());
}

}  // namespace een
