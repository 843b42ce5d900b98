#include "common/transport/device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace een::transport {
namespace {

struct Mapping {
  std::shared_ptr<void> memory;
  size_t size = 0;
};

Result<Mapping> MapAnonymous(size_t bytes, const std::string& tag) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) {
    return ResourceExhausted("cannot allocate " + std::to_string(bytes) + " bytes for " + tag);
  }
  const size_t size = std::max(page, (bytes + page - 1) / page * page);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted("cannot map " + std::to_string(size) + " bytes for " + tag + ": " +
                             std::strerror(errno));
  }
  return Mapping{std::shared_ptr<void>(p, [size](void* q) { munmap(q, size); }), size};
}

}  // namespace

Result<RegisteredMemory> Device::Allocate(size_t bytes, const std::string& tag) {
  EEN_ASSIGN_OR_RETURN(Mapping m, MapAnonymous(bytes, tag));
  EEN_ASSIGN_OR_RETURN(MemoryRegion region, RegisterMemory(m.memory.get(), m.size));
  return RegisteredMemory(std::move(m.memory), std::move(region));
}

Result<RegisteredMemory> AllocatePlain(size_t bytes, const std::string& tag) {
  EEN_ASSIGN_OR_RETURN(Mapping m, MapAnonymous(bytes, tag));
  MemoryRegion region(m.memory.get(), m.size, 0, nullptr);
  return RegisteredMemory(std::move(m.memory), std::move(region));
}

}  // namespace een::transport
