#include "ps/arena.h"

#include <utility>

namespace een::ps {

size_t Arena::BytesFor(size_t floats) { return (floats * sizeof(float) + 63) / 64 * 64; }

Result<Arena> Arena::Create(size_t bytes, transport::Device* device) {
  EEN_ASSIGN_OR_RETURN(
      transport::RegisteredMemory memory,
      device ? device->Allocate(bytes, "arena") : transport::AllocatePlain(bytes, "arena"));
  return Arena(std::move(memory));
}

float* Arena::Allocate(size_t floats) {
  const size_t bytes = BytesFor(floats);
  if (bytes > size() - used_) return nullptr;
  float* p = reinterpret_cast<float*>(static_cast<char*>(data()) + used_);
  used_ += bytes;
  return p;  // device memory is zero-filled
}

}  // namespace een::ps
