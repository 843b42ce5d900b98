#include "worker/bucket_layout.h"

#include <algorithm>
#include <cstring>

namespace een {

BucketLayout::BucketLayout(const ShardMap& map, size_t bucket_bytes) {
  const uint32_t tensors = static_cast<uint32_t>(map.tensors().size());
  segments_.resize(tensors);
  size_t fill_bytes = 0;
  for (uint32_t t = tensors; t-- > 0;) {
    if (map.tensors()[t].kind != TensorKind::kParameter) continue;  // no gradients
    const uint32_t first = map.FirstChunkOf(t);
    for (uint32_t c = first; c < first + map.ChunkCountOf(t); ++c) {
      const Chunk& chunk = map.chunks()[c];
      const size_t bytes = chunk.numel * sizeof(float);
      if (buckets_.empty() || (fill_bytes > 0 && fill_bytes + bytes > bucket_bytes)) {
        buckets_.emplace_back();
        fill_bytes = 0;
      }
      Bucket& b = buckets_.back();
      const uint32_t index = static_cast<uint32_t>(buckets_.size() - 1);
      segments_[t].push_back({index, c, b.numel, chunk.offset, chunk.numel});
      b.chunks.push_back(c);
      b.chunk_offsets.push_back(b.numel);
      if (b.tensors.empty() || b.tensors.back() != t) b.tensors.push_back(t);
      b.numel += chunk.numel;
      fill_bytes += bytes;
    }
  }
}

void BucketLayout::Pack(uint32_t t, const float* values, const std::vector<float*>& buckets) const {
  for (const Segment& s : segments_[t]) {
    std::memcpy(buckets[s.bucket] + s.bucket_offset, values + s.tensor_offset,
                s.numel * sizeof(float));
  }
}

void BucketLayout::Unpack(uint32_t t, const std::vector<const float*>& buckets,
                          float* values) const {
  for (const Segment& s : segments_[t]) {
    std::memcpy(values + s.tensor_offset, buckets[s.bucket] + s.bucket_offset,
                s.numel * sizeof(float));
  }
}

}  // namespace een
