#include "common/transport/shm/shm_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

#include "common/transport/auth.h"

namespace een::transport {

Result<std::unique_ptr<SharedMemory>> SharedMemory::Create(size_t bytes, const std::string& tag) {
  static std::atomic<int> next{0};
  // A random incarnation besides the pid: a receiver caches mappings by
  // name, so a later process that reuses this pid must not reuse the names.
  // The job's tag: receivers map only their own job's objects.
  static const std::string prefix = "/een-" + std::to_string(getpid()) + "-" + JobTag() + "-" +
                                    std::to_string(std::random_device{}()) + "-";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) {
    return ResourceExhausted("cannot make " + std::to_string(bytes) + " bytes of shared memory");
  }
  const size_t size = std::max(page, (bytes + page - 1) / page * page);
  const std::string name = prefix + tag + "-" + std::to_string(next++);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return Unavailable("cannot create shared memory " + name + ": " + std::strerror(errno));
  // posix_fallocate, not ftruncate: a full /dev/shm must fail here, not as
  // SIGBUS on first touch.
  void* p = MAP_FAILED;
  int err = posix_fallocate(fd, 0, size);
  if (err == 0) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    err = errno;
  }
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return ResourceExhausted(
        "cannot make " + std::to_string(size) + " bytes of shared memory " + name +
        " (is /dev/shm full? a container may need a larger --shm-size; --transport tcp keeps "
        "payloads out of shared memory): " +
        std::strerror(err));
  }
  return std::unique_ptr<SharedMemory>(new SharedMemory(p, size, name));
}

SharedMemory::~SharedMemory() {
  munmap(data_, size_);
  shm_unlink(name_.c_str());
}

}  // namespace een::transport
