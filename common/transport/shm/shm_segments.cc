#include "common/transport/shm/shm_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "common/transport/auth.h"
#include "common/transport/peer_text.h"

namespace een::transport::shm {
namespace {

// "/een-PID-TAG-...": made by a process of this job (SharedMemory::Create),
// in the characters SharedMemory::Create uses. Anything else (a '/', or a
// NUL that shm_open would stop at: the same file under a new name each time,
// a new mapping each time) is refused.
bool OfThisJob(const std::string& name) {
  static const std::string tag = "-" + JobTag() + "-";
  if (name.rfind("/een-", 0) != 0 || name.size() > NAME_MAX) return false;
  for (size_t i = 1; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  size_t p = 5;
  while (p < name.size() && std::isdigit(static_cast<unsigned char>(name[p]))) ++p;
  return p > 5 && name.compare(p, tag.size(), tag) == 0;
}

constexpr size_t kGranule = 1 << 20;  // requests are rounded up to this, so blocks get reused

std::string ShmError(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

Result<Blocks::Block*> Blocks::Take(size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  Block* best = nullptr;
  for (const auto& b : blocks_) {
    if (b->capacity >= size && b->header->holders.load(std::memory_order_acquire) == 0 &&
        (!best || b->capacity < best->capacity)) {
      best = b.get();
    }
  }
  if (!best) {
    auto made = Create((size + kGranule - 1) / kGranule * kGranule);
    if (!made.ok()) return made.status();
    best = *made;
  }
  best->header->holders.store(1, std::memory_order_relaxed);
  return best;
}

Result<WritableFrame> Blocks::NewFrame(size_t size) {
  EEN_ASSIGN_OR_RETURN(Block * block, Take(size));
  std::shared_ptr<const void> owner(
      block->data, [self = shared_from_this(), header = block->header](const void*) {
        Release(header);  // `self` kept the block mapped until now
      });
  return WritableFrame{block->data, Frame::Borrow(block->data, size, std::move(owner))};
}

Blocks::Block* Blocks::Share(const void* data, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);  // Take() does not hand out a block meanwhile
  for (const auto& b : blocks_) {
    if (b->data == data && size <= b->capacity &&
        b->header->holders.load(std::memory_order_acquire) > 0) {
      b->header->holders.fetch_add(1, std::memory_order_relaxed);
      return b.get();
    }
  }
  return nullptr;
}

void Blocks::Release(BlockHeader* header) {
  header->holders.fetch_sub(1, std::memory_order_release);
}

Result<Blocks::Block*> Blocks::Create(size_t capacity) {
  EEN_ASSIGN_OR_RETURN(auto memory, SharedMemory::Create(kHeaderBytes + capacity, "block"));
  auto* header = new (memory->data()) BlockHeader{};
  header->capacity = memory->size() - kHeaderBytes;
  auto block = std::make_unique<Block>();
  block->header = header;
  block->data = static_cast<std::byte*>(memory->data()) + kHeaderBytes;
  block->capacity = header->capacity;
  block->memory = std::move(memory);
  blocks_.push_back(std::move(block));
  return blocks_.back().get();
}

std::shared_ptr<void> Regions::Add(void* data, size_t size) {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return nullptr;
  char line[4096];
  const auto at = reinterpret_cast<uintptr_t>(data);
  std::shared_ptr<void> handle;
  while (std::fgets(line, sizeof line, maps)) {
    uintptr_t begin = 0, end = 0;
    unsigned long long offset = 0;
    char path[4096] = {0};
    if (std::sscanf(line, "%lx-%lx %*s %llx %*s %*s %4095s", &begin, &end, &offset, path) < 3)
      continue;
    if (at < begin || at + size > end || std::strncmp(path, "/dev/shm/", 9) != 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = next_++;
    regions_[id] = Region{static_cast<const std::byte*>(data), size, std::string(path + 8),
                          static_cast<size_t>(offset + (at - begin))};
    handle = std::shared_ptr<void>(nullptr, [table = weak_from_this(), id](void*) {
      if (std::shared_ptr<Regions> self = table.lock()) {
        std::lock_guard<std::mutex> l(self->mu_);
        self->regions_.erase(id);
      }
    });
    break;
  }
  std::fclose(maps);
  return handle;
}

std::optional<Regions::Region> Regions::Find(const void* p, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto* q = static_cast<const std::byte*>(p);
  for (const auto& [id, r] : regions_) {
    if (q >= r.base && q + n <= r.base + r.size) return r;
  }
  return std::nullopt;
}

Mappings::Mapping::~Mapping() {
  if (base) munmap(base, size);
}

Result<std::shared_ptr<Mappings::Mapping>> Mappings::Get(const std::string& name, bool writable) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = mapped_.find(name); it != mapped_.end()) {
    // A sender's segment is a block (mapped writable, for its flag) or a
    // region (read-only), never both: one named as the other is refused,
    // not written through a read-only mapping.
    if (it->second->writable != writable) {
      return InvalidArgument("shared memory " + name + " was named as a " +
                             (writable ? "region" : "block") + " before and now as a " +
                             (writable ? "block" : "region") + ": refused");
    }
    return it->second;
  }
  if (!OfThisJob(name)) {
    return InvalidArgument("shared memory " + Shown(name) +
                           " was not made by this job: refused (only /een-PID-" + JobTag() +
                           "-... objects are mapped)");
  }
  const int fd = shm_open(name.c_str(), writable ? O_RDWR : O_RDONLY, 0);
  if (fd < 0) return Unavailable(ShmError("cannot open the sender's shared memory " + name));
  struct stat st {};
  if (fstat(fd, &st) != 0 || size_t(st.st_size) < kHeaderBytes) {
    close(fd);
    return InvalidArgument("shared memory " + name + " is too small to be a block or region");
  }
  auto m = std::make_shared<Mapping>();
  m->size = st.st_size;
  m->writable = writable;
  m->base =
      mmap(nullptr, m->size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m->base == MAP_FAILED) {
    m->base = nullptr;
    return Unavailable(ShmError("cannot map shared memory " + name));
  }
  mapped_.emplace(name, m);
  return m;
}

}  // namespace een::transport::shm
