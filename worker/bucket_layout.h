// BucketLayout: how gradients are coalesced into buckets for pushing.
//
// Tensors are taken in reverse order (roughly the order backward produces
// their gradients); each tensor's chunks go, in order, into the current
// bucket until adding one would pass `bucket_bytes`, then a new bucket
// starts (a chunk larger than that gets a bucket of its own). Every chunk of
// a parameter tensor sits in exactly one bucket; buffers and frozen
// parameters take no gradients and have no segments. Pack() and Unpack() copy a tensor's
// values into and out of bucket buffers. An immutable value; no LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/shard_map.h"

namespace een {

class BucketLayout {
 public:
  struct Segment {  // one chunk of a tensor, placed in a bucket
    uint32_t bucket;
    uint32_t chunk;
    size_t bucket_offset;  // floats into the bucket
    size_t tensor_offset;  // floats into the tensor
    size_t numel;
  };
  struct Bucket {
    std::vector<uint32_t> chunks;
    std::vector<size_t> chunk_offsets;  // floats into the bucket, per chunk
    std::vector<uint32_t> tensors;      // distinct tensors with a chunk here
    size_t numel = 0;
  };

  BucketLayout(const ShardMap& map, size_t bucket_bytes);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<Segment>& segments(uint32_t tensor) const { return segments_[tensor]; }

  // Copies tensor `t`'s values into its places in `buckets` (one buffer per bucket).
  void Pack(uint32_t t, const float* values, const std::vector<float*>& buckets) const;
  // Copies tensor `t`'s values out of `buckets`.
  void Unpack(uint32_t t, const std::vector<const float*>& buckets, float* values) const;

 private:
  std::vector<Bucket> buckets_;
  std::vector<std::vector<Segment>> segments_;
};

}  // namespace een
