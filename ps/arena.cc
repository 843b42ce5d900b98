#include "ps/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace een::ps {

size_t Arena::BytesFor(size_t floats) { return (floats * sizeof(float) + 63) / 64 * 64; }

Result<Arena> Arena::Create(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = std::max(page, (bytes + page - 1) / page * page);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted("cannot map a " + std::to_string(size) + "-byte PS arena: " +
                             std::strerror(errno));
  }
  return Arena(p, size);
}

Arena::Arena(Arena&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)),
      used_(std::exchange(o.used_, 0)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, size_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    used_ = std::exchange(o.used_, 0);
  }
  return *this;
}

Arena::~Arena() {
  if (base_) munmap(base_, size_);
}

float* Arena::Allocate(size_t floats) {
  const size_t bytes = BytesFor(floats);
  if (used_ + bytes > size_) return nullptr;
  float* p = reinterpret_cast<float*>(static_cast<char*>(base_) + used_);
  used_ += bytes;
  return p;  // anonymous mappings are zero-filled
}

}  // namespace een::ps
