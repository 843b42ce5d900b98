#include "common/transport/shm/shm_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

namespace een::transport {
namespace {

constexpr size_t kShmMin = 64 << 10;   // smaller frames go inline
constexpr size_t kHeaderBytes = 64;    // BlockHeader, padded to a cache line
constexpr size_t kGranule = 1 << 20;   // block capacities are multiples of this
constexpr uint32_t kManifestMagic = 0x53454E45;  // "EENS"
// How a frame travels: in the message, copied into a block, or in place in
// the sender's registered shared memory.
constexpr uint8_t kInline = 0, kInBlock = 1, kInRegion = 2;

struct BlockHeader {
  std::atomic<uint32_t> in_use;  // 1 from the sender's copy until the receiver drops the frame
  uint32_t reserved;
  uint64_t capacity;
};
static_assert(sizeof(BlockHeader) <= kHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

std::string ShmError(const std::string& what) { return what + ": " + std::strerror(errno); }

// "shm:///PATH" -> "ipc:///PATH"
std::string IpcAddress(const std::string& address) { return "ipc://" + address.substr(6); }

}  // namespace

class ShmDevice::Blocks {
 public:
  struct Block {
    std::string name;
    BlockHeader* header;
    std::byte* data;
    size_t capacity;
  };

  Blocks() : prefix_("/een-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}()) + "-") {}
  ~Blocks() {
    for (const auto& b : blocks_) {
      munmap(b->header, kHeaderBytes + b->capacity);
      shm_unlink(b->name.c_str());
    }
  }

  // A free block of at least `size` bytes (the smallest such), marked in use.
  Result<Block*> Take(size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    Block* best = nullptr;
    for (const auto& b : blocks_) {
      if (b->capacity >= size && b->header->in_use.load(std::memory_order_acquire) == 0 &&
          (!best || b->capacity < best->capacity)) {
        best = b.get();
      }
    }
    if (!best) {
      auto made = Create((size + kGranule - 1) / kGranule * kGranule);
      if (!made.ok()) return made.status();
      best = *made;
    }
    best->header->in_use.store(1, std::memory_order_relaxed);
    return best;
  }

 private:
  Result<Block*> Create(size_t capacity) {
    const std::string name = prefix_ + std::to_string(next_++);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return Unavailable(ShmError("cannot create shared memory " + name));
    if (ftruncate(fd, kHeaderBytes + capacity) != 0) {
      Status s = ResourceExhausted(ShmError("cannot size shared memory " + name + " to " +
                                            std::to_string(capacity) + " bytes (is /dev/shm full?)"));
      close(fd);
      shm_unlink(name.c_str());
      return s;
    }
    void* p = mmap(nullptr, kHeaderBytes + capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      shm_unlink(name.c_str());
      return ResourceExhausted(ShmError("cannot map shared memory " + name));
    }
    auto* header = new (p) BlockHeader{};
    header->capacity = capacity;
    blocks_.push_back(std::make_unique<Block>(
        Block{name, header, static_cast<std::byte*>(p) + kHeaderBytes, capacity}));
    return blocks_.back().get();
  }

  const std::string prefix_;
  std::mutex mu_;
  uint64_t next_ = 0;
  std::vector<std::unique_ptr<Block>> blocks_;
};

// Registered memory that lives in a /dev/shm file: frames inside it travel
// as (file, offset, size), with no copy at all.
class ShmDevice::Regions {
 public:
  struct Region {
    const std::byte* base;
    size_t size;
    std::string name;  // "/een-..."
    size_t offset;     // of `base` in the file
  };

  // Finds the /dev/shm file mapped at [data, data + size) in /proc/self/maps.
  std::shared_ptr<void> Add(void* data, size_t size) {
    std::FILE* maps = std::fopen("/proc/self/maps", "r");
    if (!maps) return nullptr;
    char line[4096];
    const auto at = reinterpret_cast<uintptr_t>(data);
    std::shared_ptr<void> handle;
    while (std::fgets(line, sizeof line, maps)) {
      uintptr_t begin = 0, end = 0;
      unsigned long long offset = 0;
      char path[4096] = {0};
      if (std::sscanf(line, "%lx-%lx %*s %llx %*s %*s %4095s", &begin, &end, &offset, path) < 3) continue;
      if (at < begin || at + size > end || std::strncmp(path, "/dev/shm/", 9) != 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t id = next_++;
      regions_[id] = Region{static_cast<const std::byte*>(data), size, std::string(path + 8),
                            static_cast<size_t>(offset + (at - begin))};
      handle = std::shared_ptr<void>(nullptr, [this, id](void*) {
        std::lock_guard<std::mutex> l(mu_);
        regions_.erase(id);
      });
      break;
    }
    std::fclose(maps);
    return handle;
  }

  // The region holding [p, p + n), if any.
  std::optional<Region> Find(const void* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto* q = static_cast<const std::byte*>(p);
    for (const auto& [id, r] : regions_) {
      if (q >= r.base && q + n <= r.base + r.size) return r;
    }
    return std::nullopt;
  }

 private:
  std::mutex mu_;
  uint64_t next_ = 0;
  std::map<uint64_t, Region> regions_;
};

class ShmDevice::Mappings {
 public:
  struct Mapping {
    void* base = nullptr;
    size_t size = 0;
    ~Mapping() {
      if (base) munmap(base, size);
    }
  };

  // Blocks are mapped writable (their free flag), registered regions read-only.
  Result<std::shared_ptr<Mapping>> Get(const std::string& name, bool writable = true) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = mapped_.find(name); it != mapped_.end()) return it->second;
    const int fd = shm_open(name.c_str(), writable ? O_RDWR : O_RDONLY, 0);
    if (fd < 0) return Unavailable(ShmError("cannot open the sender's shared memory " + name));
    struct stat st {};
    if (fstat(fd, &st) != 0 || size_t(st.st_size) < kHeaderBytes) {
      close(fd);
      return InvalidArgument("shared memory " + name + " is not a block");
    }
    auto m = std::make_shared<Mapping>();
    m->size = st.st_size;
    m->base = mmap(nullptr, m->size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m->base == MAP_FAILED) {
      m->base = nullptr;
      return Unavailable(ShmError("cannot map shared memory " + name));
    }
    mapped_.emplace(name, m);
    return m;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Mapping>> mapped_;
};

namespace {

// Moves large frames into blocks and appends the manifest; on failure every
// block taken is given back.
class Packer {
 public:
  Packer(ShmDevice::Blocks& blocks, ShmDevice::Regions& regions)
      : blocks_(blocks), regions_(regions) {}
  ~Packer() {
    if (!sent_) {
      for (auto* b : taken_) b->header->in_use.store(0, std::memory_order_release);
    }
  }
  Status Pack(Message& m) {
    std::vector<std::byte> manifest;
    auto put = [&](const void* p, size_t n) {
      manifest.insert(manifest.end(), static_cast<const std::byte*>(p),
                      static_cast<const std::byte*>(p) + n);
    };
    const uint32_t count = static_cast<uint32_t>(m.frames.size());
    put(&kManifestMagic, 4);
    put(&count, 4);
    for (size_t i = 0; i < m.frames.size(); ++i) {
      Frame& f = m.frames[i];
      const bool large = i > 0 && f.size() >= kShmMin;
      if (large) {
        if (auto region = regions_.Find(f.data(), f.size())) {  // registered: no copy
          const uint8_t kind = kInRegion;
          const uint8_t len = static_cast<uint8_t>(region->name.size());
          const uint64_t offset = region->offset + (f.data() - region->base), size = f.size();
          put(&kind, 1);
          put(&len, 1);
          put(region->name.data(), len);
          put(&offset, 8);
          put(&size, 8);
          f = Frame();
          continue;
        }
      }
      const uint8_t kind = large ? kInBlock : kInline;
      put(&kind, 1);
      if (!large) continue;
      auto block = blocks_.Take(f.size());
      if (!block.ok()) return block.status();
      taken_.push_back(*block);
      std::memcpy((*block)->data, f.data(), f.size());
      const uint8_t len = static_cast<uint8_t>((*block)->name.size());
      const uint64_t size = f.size();
      put(&len, 1);
      put((*block)->name.data(), len);
      put(&size, 8);
      f = Frame();  // the bytes travel in the block
    }
    m.frames.push_back(Frame::Own(std::move(manifest)));
    return Status::Ok();
  }
  void Sent() { sent_ = true; }

 private:
  ShmDevice::Blocks& blocks_;
  ShmDevice::Regions& regions_;
  std::vector<ShmDevice::Blocks::Block*> taken_;
  bool sent_ = false;
};

// Replaces the frames the manifest names with views of the sender's blocks.
Status Unpack(ShmDevice::Mappings& mappings, std::vector<Frame>& frames) {
  if (frames.empty()) return InvalidArgument("shm message without a manifest");
  const Frame manifest = std::move(frames.back());
  frames.pop_back();
  const std::byte* p = manifest.data();
  const std::byte* end = p + manifest.size();
  auto take = [&](void* out, size_t n) {
    if (size_t(end - p) < n) return false;
    std::memcpy(out, p, n);
    p += n;
    return true;
  };
  uint32_t magic = 0, count = 0;
  if (!take(&magic, 4) || magic != kManifestMagic || !take(&count, 4) || count != frames.size()) {
    return InvalidArgument("shm message with a bad manifest (is the peer an EEN shm endpoint?)");
  }
  for (uint32_t i = 0; i < count; ++i) {
    uint8_t kind = 0, len = 0;
    if (!take(&kind, 1) || kind > kInRegion) return InvalidArgument("shm manifest cut short or bad");
    if (kind == kInline) continue;
    std::string name(64, '\0');
    uint64_t size = 0, offset = 0;
    if (!take(&len, 1) || len > name.size() || !take(name.data(), len) ||
        (kind == kInRegion && !take(&offset, 8)) || !take(&size, 8)) {
      return InvalidArgument("shm manifest cut short");
    }
    name.resize(len);
    if (kind == kInRegion) {  // the sender's registered memory, valid while its protocol says
      auto mapping = mappings.Get(name, /*writable=*/false);
      if (!mapping.ok()) return mapping.status();
      if (offset + size > (*mapping)->size) {
        return InvalidArgument("shm frame beyond the end of region " + name);
      }
      const auto* data = static_cast<const std::byte*>((*mapping)->base) + offset;
      frames[i] = Frame::Borrow(data, size, std::shared_ptr<const void>(*mapping, data));
      continue;
    }
    auto mapping = mappings.Get(name);
    if (!mapping.ok()) return mapping.status();
    auto* header = static_cast<BlockHeader*>((*mapping)->base);
    if (size > header->capacity || kHeaderBytes + size > (*mapping)->size) {
      return InvalidArgument("shm frame of " + std::to_string(size) + " bytes in block " + name +
                             " of " + std::to_string(header->capacity));
    }
    const auto* data = static_cast<const std::byte*>((*mapping)->base) + kHeaderBytes;
    std::shared_ptr<const void> owner(data, [m = *mapping, header](const void*) {
      header->in_use.store(0, std::memory_order_release);  // the sender may reuse it
    });
    frames[i] = Frame::Borrow(data, size, std::move(owner));
  }
  return Status::Ok();
}

class ShmListener : public Listener {
 public:
  ShmListener(std::unique_ptr<Listener> inner, std::string address,
              std::shared_ptr<ShmDevice::Blocks> blocks, std::shared_ptr<ShmDevice::Regions> regions,
              std::shared_ptr<ShmDevice::Mappings> mappings)
      : inner_(std::move(inner)), address_(std::move(address)), blocks_(std::move(blocks)),
        regions_(std::move(regions)), mappings_(std::move(mappings)) {}
  const std::string& address() const override { return address_; }
  Result<Envelope> Receive(std::chrono::milliseconds timeout) override {
    auto e = inner_->Receive(timeout);
    if (!e.ok()) return e;
    EEN_RETURN_IF_ERROR(Unpack(*mappings_, e->message.frames));
    return e;
  }
  Status Send(const PeerId& to, Message message) override {
    Packer packer(*blocks_, *regions_);
    EEN_RETURN_IF_ERROR(packer.Pack(message));
    EEN_RETURN_IF_ERROR(inner_->Send(to, std::move(message)));
    packer.Sent();
    return Status::Ok();
  }

 private:
  std::unique_ptr<Listener> inner_;
  std::string address_;
  std::shared_ptr<ShmDevice::Blocks> blocks_;
  std::shared_ptr<ShmDevice::Regions> regions_;
  std::shared_ptr<ShmDevice::Mappings> mappings_;
};

class ShmConnection : public Connection {
 public:
  ShmConnection(std::unique_ptr<Connection> inner, std::string address,
                std::shared_ptr<ShmDevice::Blocks> blocks,
                std::shared_ptr<ShmDevice::Regions> regions,
                std::shared_ptr<ShmDevice::Mappings> mappings)
      : inner_(std::move(inner)), address_(std::move(address)), blocks_(std::move(blocks)),
        regions_(std::move(regions)), mappings_(std::move(mappings)) {}
  const std::string& address() const override { return address_; }
  Status Send(Message message) override {
    Packer packer(*blocks_, *regions_);
    EEN_RETURN_IF_ERROR(packer.Pack(message));
    EEN_RETURN_IF_ERROR(inner_->Send(std::move(message)));
    packer.Sent();
    return Status::Ok();
  }
  Result<Message> Receive(std::chrono::milliseconds timeout) override {
    auto m = inner_->Receive(timeout);
    if (!m.ok()) return m;
    EEN_RETURN_IF_ERROR(Unpack(*mappings_, m->frames));
    return m;
  }

 private:
  std::unique_ptr<Connection> inner_;
  std::string address_;
  std::shared_ptr<ShmDevice::Blocks> blocks_;
  std::shared_ptr<ShmDevice::Regions> regions_;
  std::shared_ptr<ShmDevice::Mappings> mappings_;
};

}  // namespace

ShmDevice::ShmDevice()
    : blocks_(std::make_shared<Blocks>()), regions_(std::make_shared<Regions>()),
      mappings_(std::make_shared<Mappings>()) {}
ShmDevice::~ShmDevice() = default;

Result<std::unique_ptr<Listener>> ShmDevice::Listen(const std::string& address) {
  EEN_ASSIGN_OR_RETURN(Device * ipc, DeviceFor(IpcAddress(address)));
  EEN_ASSIGN_OR_RETURN(auto inner, ipc->Listen(IpcAddress(address)));
  return std::unique_ptr<Listener>(new ShmListener(std::move(inner), address, blocks_, regions_, mappings_));
}

Result<std::unique_ptr<Connection>> ShmDevice::Connect(const std::string& address) {
  EEN_ASSIGN_OR_RETURN(Device * ipc, DeviceFor(IpcAddress(address)));
  EEN_ASSIGN_OR_RETURN(auto inner, ipc->Connect(IpcAddress(address)));
  return std::unique_ptr<Connection>(new ShmConnection(std::move(inner), address, blocks_, regions_, mappings_));
}

Result<MemoryRegion> ShmDevice::RegisterMemory(void* data, size_t size) {
  // Memory in a /dev/shm file is sent in place; any other is copied as usual.
  return MemoryRegion(data, size, 0, regions_->Add(data, size));
}

void RemoveShmBlocksOf(pid_t pid) {
  const std::string prefix = "een-" + std::to_string(pid) + "-";
  DIR* dir = opendir("/dev/shm");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      shm_unlink(("/" + std::string(e->d_name)).c_str());
    }
  }
  closedir(dir);
}

}  // namespace een::transport
