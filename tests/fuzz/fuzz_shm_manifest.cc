// Fuzz target: the shm transport's manifest (the last frame of every shm
// message), as a receiver unpacks it: frames inline, in one of the sender's
// blocks or in its registered region, by name, offset and size. Two real
// segments of "this job" exist (shm_names.h), so a manifest can name them;
// every view Unpack() hands out is read whole, so a bound it got wrong
// faults here.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "common/transport/shm/shm_manifest.h"
#include "fuzz/message_frames.h"
#include "fuzz/shm_names.h"

using namespace een;
using namespace een::transport;

namespace {

void MakeSegment(const char* name, size_t bytes, bool block) {
  const int fd = shm_open(name, O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::abort();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) std::abort();
  std::memset(p, 0x5a, bytes);
  if (block) {
    auto* header = new (p) shm::BlockHeader{};
    header->capacity = bytes - shm::kHeaderBytes;
  }
  munmap(p, bytes);
}

void RemoveSegments() {
  shm_unlink(fuzz::kBlockName);
  shm_unlink(fuzz::kRegionName);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  MakeSegment(fuzz::kBlockName, shm::kHeaderBytes + fuzz::kSegmentBytes, true);
  MakeSegment(fuzz::kRegionName, fuzz::kSegmentBytes, false);
  std::atexit(RemoveSegments);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shm::Mappings mappings;
  Message m = fuzz::MessageOf(data, size);
  if (!shm::Unpack(mappings, m.frames).ok()) return 0;
  volatile uint8_t sum = 0;
  for (const Frame& f : m.frames) {
    const auto* b = reinterpret_cast<const uint8_t*>(f.data());
    for (size_t i = 0; i < f.size(); ++i) sum = sum + b[i];
  }
  return 0;
}
