#include "ps/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace een::ps {

size_t Arena::BytesFor(size_t floats) { return (floats * sizeof(float) + 63) / 64 * 64; }

Result<Arena> Arena::Create(size_t bytes, bool shared) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = std::max(page, (bytes + page - 1) / page * page);
  if (!shared) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhausted("cannot map a " + std::to_string(size) + "-byte PS arena: " +
                               std::strerror(errno));
    }
    return Arena(p, size, nullptr);
  }
  EEN_ASSIGN_OR_RETURN(auto memory, transport::SharedMemory::Create(size, "arena"));
  void* p = memory->data();
  const size_t mapped = memory->size();
  return Arena(p, mapped, std::move(memory));
}

Arena::Arena(Arena&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), shared_(std::move(o.shared_)),
      size_(std::exchange(o.size_, 0)), used_(std::exchange(o.used_, 0)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    if (base_ && !shared_) munmap(base_, size_);
    base_ = std::exchange(o.base_, nullptr);
    shared_ = std::move(o.shared_);
    size_ = std::exchange(o.size_, 0);
    used_ = std::exchange(o.used_, 0);
  }
  return *this;
}

Arena::~Arena() {
  if (base_ && !shared_) munmap(base_, size_);  // a shared arena's memory goes with shared_
}

float* Arena::Allocate(size_t floats) {
  const size_t bytes = BytesFor(floats);
  if (used_ + bytes > size_) return nullptr;
  float* p = reinterpret_cast<float*>(static_cast<char*>(base_) + used_);
  used_ += bytes;
  return p;  // anonymous mappings are zero-filled
}

}  // namespace een::ps
