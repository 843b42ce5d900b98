#include "common/receive_heap.h"

#include <malloc.h>

#include <cstdlib>
#include <string>

namespace een {
namespace {

// EEN_KEEP_FREED_MEMORY=0: leave malloc's settings alone.
bool Allowed() {
  const char* keep = std::getenv("EEN_KEEP_FREED_MEMORY");
  return !keep || std::string(keep) != "0";
}

}  // namespace

void KeepFreedReceiveBuffers() {
  if (!Allowed()) return;
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void ShareOneHeap() {
  if (Allowed()) mallopt(M_ARENA_MAX, 1);
}

}  // namespace een
