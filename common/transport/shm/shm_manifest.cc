#include "common/transport/shm/shm_manifest.h"

#include <cstring>
#include <string>

namespace een::transport::shm {
namespace {

constexpr size_t kShmMin = 64 << 10;             // smaller frames go inline
constexpr uint32_t kManifestMagic = 0x53454E45;  // "EENS"
constexpr uint8_t kInline = 0, kInBlock = 1, kInRegion = 2;

}  // namespace

Packer::~Packer() {
  if (!sent_) {
    for (auto* b : taken_) Blocks::Release(b->header);
  }
}

Status Packer::Pack(Message& m) {
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
    Blocks::Block* block = blocks_.Share(f.data(), f.size());  // made in a block: no copy
    if (!block) {
      EEN_ASSIGN_OR_RETURN(block, blocks_.Take(f.size()));
      std::memcpy(block->data, f.data(), f.size());
    }
    taken_.push_back(block);
    const uint8_t len = static_cast<uint8_t>(block->memory->name().size());
    const uint64_t size = f.size();
    put(&len, 1);
    put(block->memory->name().data(), len);
    put(&size, 8);
    f = Frame();  // the bytes travel in the block
  }
  m.frames.push_back(Frame::Own(std::move(manifest)));
  return Status::Ok();
}

// Replaces the frames the manifest names with views of the sender's blocks.
Status Unpack(Mappings& mappings, std::vector<Frame>& frames) {
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
    if (!take(&kind, 1) || kind > kInRegion)
      return InvalidArgument("shm manifest cut short or bad");
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
      if (offset > (*mapping)->size || size > (*mapping)->size - offset) {  // no wrap-around
        return InvalidArgument("shm frame beyond the end of region " + name);
      }
      const auto* data = static_cast<const std::byte*>((*mapping)->base) + offset;
      frames[i] = Frame::Borrow(data, size, std::shared_ptr<const void>(*mapping, data));
      continue;
    }
    auto mapping = mappings.Get(name);
    if (!mapping.ok()) return mapping.status();
    auto* header = static_cast<BlockHeader*>((*mapping)->base);
    if (size > header->capacity || (*mapping)->size < kHeaderBytes ||
        size > (*mapping)->size - kHeaderBytes) {  // no wrap-around
      return InvalidArgument("shm frame of " + std::to_string(size) + " bytes in block " + name +
                             " of " + std::to_string(header->capacity));
    }
    const auto* data = static_cast<const std::byte*>((*mapping)->base) + kHeaderBytes;
    std::shared_ptr<const void> owner(data, [m = *mapping, header](const void*) {
      Blocks::Release(header);  // the sender reuses it once no one holds it
    });
    frames[i] = Frame::Borrow(data, size, std::move(owner));
  }
  return Status::Ok();
}

}  // namespace een::transport::shm
