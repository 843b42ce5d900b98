#include "een/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "een/error.h"

namespace een {

DistributedSampler::DistributedSampler(size_t dataset_size, int rank, int world_size, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : size_(dataset_size),
      rank_(rank),
      world_(world_size),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error("DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " +
                std::to_string(world_size) + ")");
  }
  if (dataset_size == 0) throw Error("DistributedSampler: the dataset is empty");
  set_epoch(0);
}

void DistributedSampler::set_epoch(uint64_t epoch) {
  epoch_ = epoch;
  order_.resize(size_);
  std::iota(order_.begin(), order_.end(), size_t{0});
  if (shuffle_) {
    // Fisher-Yates with a fixed engine: the same order on every platform.
    std::mt19937_64 rng(seed_ + epoch_);
    for (size_t i = size_ - 1; i > 0; --i) {
      std::swap(order_[i], order_[rng() % (i + 1)]);
    }
  }
}

std::vector<size_t> DistributedSampler::Batch(uint64_t position, int index, int count,
                                              size_t batch) const {
  if (count < 1 || index < 0 || index >= count) {
    throw Error("DistributedSampler::Batch: index " + std::to_string(index) + " is not in [0, " +
                std::to_string(count) + ")");
  }
  std::vector<size_t> out(batch);
  for (size_t i = 0; i < batch; ++i) out[i] = order_[(position + index + i * count) % size_];
  return out;
}

std::vector<size_t> DistributedSampler::Slice(uint64_t position, uint64_t offset,
                                              uint64_t count) const {
  if (size_ == 0) throw Error("DistributedSampler::Slice: the dataset is empty");
  std::vector<size_t> out(count);
  // Modulo first: position, offset and i are each below 2^63 in practice,
  // and their remainders sum without overflow.
  const uint64_t start = (position % size_ + offset % size_) % size_;
  for (uint64_t i = 0; i < count; ++i) out[i] = order_[(start + i % size_) % size_];
  return out;
}

namespace {

// `n` more steps of `per_step` positions each (per_step >= 1), in closed
// form: the step that reaches the end of an epoch starts the next at 0.
DataPosition Advance(DataPosition at, uint64_t n, unsigned __int128 per_step, uint64_t size) {
  if (n == 0) return at;
  const unsigned __int128 left = size - at.position;  // > 0: position < size
  const unsigned __int128 to_end = (left + per_step - 1) / per_step;
  if (n < to_end) {
    at.position += static_cast<uint64_t>(n * per_step);
    return at;
  }
  n -= static_cast<uint64_t>(to_end);
  const unsigned __int128 per_epoch = (size + per_step - 1) / per_step;  // >= 1
  at.epoch += 1 + static_cast<uint64_t>(n / per_epoch);
  at.position = static_cast<uint64_t>((n % per_epoch) * per_step);
  return at;
}

}  // namespace

DataPosition PositionAfter(uint64_t steps, int world_size,
                           const std::vector<MembershipChange>& changes, uint64_t dataset_size,
                           uint64_t batch) {
  if (dataset_size == 0 || batch == 0 || world_size < 1) {
    throw Error("PositionAfter: dataset size, batch and world size must be positive");
  }
  DataPosition at;
  int live = world_size;
  size_t next = 0;  // the next change to take effect
  for (uint64_t s = 0; s < steps;) {
    while (next < changes.size() && changes[next].step <= s) live = changes[next++].live_count();
    if (live < 1) throw Error("PositionAfter: a membership change leaves no worker");
    // Until the next change (whose step is past s), `live` workers train.
    const uint64_t until = next < changes.size() ? std::min(steps, changes[next].step) : steps;
    at = Advance(at, until - s, static_cast<unsigned __int128>(live) * batch, dataset_size);
    s = until;
  }
  return at;
}

size_t DistributedSampler::num_samples() const {
  return drop_last_ ? size_ / world_ : (size_ + world_ - 1) / world_;
}

std::vector<size_t> DistributedSampler::indices() const {
  const std::vector<size_t>& order = order_;
  const size_t total = num_samples() * world_;
  std::vector<size_t> mine;
  mine.reserve(num_samples());
  for (size_t pos = rank_; pos < total; pos += world_) mine.push_back(order[pos % size_]);
  return mine;
}

}  // namespace een
