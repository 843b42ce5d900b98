#include "common/receive_heap.h"

#include <malloc.h>

#include <cstdlib>
#include <string>

namespace een {

void KeepFreedReceiveBuffers() {
  const char* keep = std::getenv("EEN_KEEP_FREED_MEMORY");
  if (keep && std::string(keep) == "0") return;
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void ShareOneHeap() {
  const char* keep = std::getenv("EEN_KEEP_FREED_MEMORY");
  if (keep && std::string(keep) == "0") return;
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace een
