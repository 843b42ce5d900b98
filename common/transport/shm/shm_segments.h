// Shared-memory segments behind the shm transport (shm_device.h):
//  - Blocks: the sender's reusable blocks. A large frame is copied into a
//    free block (the smallest that fits; a new SharedMemory,
//    /dev/shm/een-PID-R-block-N, if none); the block's header counts its
//    holders: one per receiver, which lets go when it drops the frame, so
//    the block is reused once none holds it. A frame made in a block
//    (NewFrame) is sent without copying, to any number of receivers: its
//    maker holds the block too, until its last copy of the frame goes.
//  - Regions: memory registered with the device that lives in a /dev/shm
//    file (found in /proc/self/maps): frames inside it are sent in place.
//  - Mappings: the receiver's mappings of the senders' blocks (writable,
//    for the flag) and regions (read-only), by file name, kept for reuse.
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport/frame.h"
#include "common/transport/shm/shm_memory.h"

namespace een::transport::shm {

constexpr size_t kHeaderBytes = 64;  // BlockHeader, padded to a cache line

struct BlockHeader {
  std::atomic<uint32_t> holders;  // receivers (and the maker) that have not let go; 0: free
  uint32_t reserved;
  uint64_t capacity;
};
static_assert(sizeof(BlockHeader) <= kHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Made with std::make_shared: frames made in a block keep the blocks mapped.
class Blocks : public std::enable_shared_from_this<Blocks> {
 public:
  struct Block {
    std::unique_ptr<SharedMemory> memory;  // unmapped and unlinked with the Blocks
    BlockHeader* header;
    std::byte* data;
    size_t capacity;
  };
  // A free block of at least `size` bytes, with one holder (its receiver).
  Result<Block*> Take(size_t size);
  // A frame of `size` bytes at the start of a block its copies hold.
  Result<WritableFrame> NewFrame(size_t size);
  // The block a frame of NewFrame() at `data` (`size` bytes) lies in, with
  // one more holder (a receiver); null when it lies in none.
  Block* Share(const void* data, size_t size);
  // A holder lets go of `header`'s block.
  static void Release(BlockHeader* header);

 private:
  Result<Block*> Create(size_t capacity);
  std::mutex mu_;
  std::vector<std::unique_ptr<Block>> blocks_;
};

// Made with std::make_shared: a handle that outlives the table (memory
// freed after the device, at exit) then unregisters nothing.
class Regions : public std::enable_shared_from_this<Regions> {
 public:
  struct Region {
    const std::byte* base;
    size_t size;
    std::string name;  // "/een-..."
    size_t offset;     // of `base` in the file
  };
  // Registers [data, data + size) if a /dev/shm file is mapped there; the
  // handle unregisters it (null: not shared memory, nothing registered).
  std::shared_ptr<void> Add(void* data, size_t size);
  // The region holding [p, p + n), if any.
  std::optional<Region> Find(const void* p, size_t n);

 private:
  std::mutex mu_;
  uint64_t next_ = 0;
  std::map<uint64_t, Region> regions_;
};

class Mappings {
 public:
  struct Mapping {
    void* base = nullptr;
    size_t size = 0;
    bool writable = false;
    ~Mapping();
  };
  // Blocks are mapped writable (their in-use flag), registered regions read-only.
  Result<std::shared_ptr<Mapping>> Get(const std::string& name, bool writable = true);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Mapping>> mapped_;
};

}  // namespace een::transport::shm
