#include "een/sampler.h"

#include <algorithm>
#include <iterator>
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

// Where the data stands at the start of a step, as the walk over the
// membership history finds it.
struct Place {
  uint64_t epoch = 0;
  uint64_t position = 0;
  std::vector<uint64_t> owed;         // positions drawn before fresh ones
  std::vector<uint64_t> owed_epochs;  // of each: `epoch`, or an earlier one that ended meanwhile
};

// The position of slot `j` of a step's global batch that starts at `at`, and its epoch.
uint64_t SlotPosition(const Place& at, uint64_t j, uint64_t size) {
  if (j < at.owed.size()) return at.owed[j];
  return (at.position + (j - at.owed.size()) % size) % size;
}
uint64_t SlotEpoch(const Place& at, uint64_t j) {
  return j < at.owed_epochs.size() ? at.owed_epochs[j] : at.epoch;
}

// One step of `per_step` positions: the owed first, then fresh ones.
void TakeStep(Place& at, uint64_t per_step, uint64_t size) {
  const uint64_t owed = std::min<uint64_t>(at.owed.size(), per_step);
  at.owed.erase(at.owed.begin(), at.owed.begin() + static_cast<ptrdiff_t>(owed));
  at.owed_epochs.erase(at.owed_epochs.begin(),
                       at.owed_epochs.begin() + static_cast<ptrdiff_t>(owed));
  const uint64_t fresh = per_step - owed;
  if (fresh == 0) return;
  if (fresh >= size - at.position) {  // the step that reaches the end wraps
    ++at.epoch;
    at.position = 0;
  } else {
    at.position += fresh;
  }
}

// `n` more steps: while positions are owed one by one, then in closed form.
Place AdvancePlace(Place at, uint64_t n, uint64_t live, uint64_t batch, uint64_t size) {
  const unsigned __int128 per_step = static_cast<unsigned __int128>(live) * batch;
  for (; n > 0 && !at.owed.empty(); --n) TakeStep(at, static_cast<uint64_t>(per_step), size);
  const DataPosition next = Advance({at.epoch, at.position}, n, per_step, size);
  at.epoch = next.epoch;
  at.position = next.position;
  return at;
}

// A stretch of steps under one membership, from `start` on.
struct Segment {
  uint64_t start = 0;
  Place at;  // at `start`
  const std::vector<int>* live = nullptr;
  const std::vector<uint32_t>* shares = nullptr;
};

// A lost worker's unfinished steps are owed back at most this far (the PS
// report at most two; more would be a liar's list).
constexpr uint64_t kMaxOwedSteps = 8;
const std::vector<UnfinishedSteps> kNoneOwed;

// The slots worker `rank` takes in the step that starts at `at` (empty: not
// live): slot index, index + count, ... of the global batch, or its
// contiguous share under --dynamic-slicing.
std::vector<uint64_t> SlotsIn(const std::vector<int>& live, const std::vector<uint32_t>& shares,
                              int rank, uint64_t batch) {
  std::vector<uint64_t> out;
  const auto me = std::find(live.begin(), live.end(), rank);
  if (me == live.end()) return out;
  const uint64_t index = static_cast<uint64_t>(me - live.begin());
  if (shares.size() == live.size()) {  // --dynamic-slicing: its contiguous share
    const uint64_t offset =
        std::accumulate(shares.begin(), me - live.begin() + shares.begin(), uint64_t{0});
    for (uint64_t k = 0; k < shares[index]; ++k) out.push_back(offset + k);
  } else {
    for (uint64_t k = 0; k < batch; ++k) out.push_back(index + k * live.size());
  }
  return out;
}

// The positions worker `rank` takes in the step that starts at `at`.
std::vector<uint64_t> PositionsIn(const Place& at, const std::vector<int>& live,
                                  const std::vector<uint32_t>& shares, int rank, uint64_t batch,
                                  uint64_t size) {
  std::vector<uint64_t> out;
  for (uint64_t j : SlotsIn(live, shares, rank, batch)) out.push_back(SlotPosition(at, j, size));
  return out;
}

// Walks the history to the start of step `steps`. With `owe`, a change's
// lost workers' unfinished steps (of the epoch the data is in then) are
// owed back.
StepData Walk(uint64_t steps, int world_size, const std::vector<MembershipChange>& changes,
              uint64_t size, uint64_t batch, bool owe, const char* caller) {
  if (size == 0 || batch == 0 || world_size < 1) {
    throw Error(std::string(caller) + ": dataset size, batch and world size must be positive");
  }
  std::vector<int> everyone(static_cast<size_t>(world_size));
  std::iota(everyone.begin(), everyone.end(), 0);
  const std::vector<uint32_t> equal;
  std::vector<Segment> segments{{0, {}, &everyone, &equal}};
  Place at;
  size_t next = 0;  // the next change to take effect
  // Where each change's data take effect: its layout step, never before the one before's.
  std::vector<uint64_t> layout(changes.size());
  for (size_t k = 0; k < changes.size(); ++k) {
    const uint64_t late = std::min(changes[k].layout_step() - changes[k].step, kMaxDataLookAhead);
    layout[k] = std::max(changes[k].step + late, k > 0 ? layout[k - 1] : uint64_t{0});
  }
  for (uint64_t s = 0;;) {
    while (next < changes.size() && layout[next] <= s) {
      // Owed: a lost worker's steps from its first unfinished one to here (the
      // steps the others' loaders had drawn ahead in the old layout included).
      const uint64_t back =
          kMaxOwedSteps + std::min(layout[next] - changes[next].step, kMaxDataLookAhead);
      const MembershipChange& change = changes[next++];
      if (change.live.empty())
        throw Error(std::string(caller) + ": a membership change leaves no worker");
      for (const UnfinishedSteps& u : owe ? change.unfinished : kNoneOwed) {
        const uint64_t first = std::max(u.from_step, s - std::min(s, back));
        for (uint64_t t = first; t < s; ++t) {
          // The segment step t was in (each starts no later than the one after it).
          const auto seg = std::prev(
              std::upper_bound(segments.begin(), segments.end(), t,
                               [](uint64_t step, const Segment& g) { return step < g.start; }));
          const Place then = AdvancePlace(seg->at, t - seg->start, seg->live->size(), batch, size);
          // (Of an epoch that ended meanwhile too: drawn first in the next one, for its own.)
          for (uint64_t j : SlotsIn(*seg->live, *seg->shares, u.worker, batch)) {
            at.owed.push_back(SlotPosition(then, j, size));
            at.owed_epochs.push_back(SlotEpoch(then, j));
          }
        }
      }
      segments.push_back({s, at, &change.live, &change.shares});
    }
    if (s >= steps) break;
    // Until the next change (whose step is past s), the same workers train.
    const uint64_t until = next < changes.size() ? std::min(steps, layout[next]) : steps;
    at = AdvancePlace(at, until - s, segments.back().live->size(), batch, size);
    s = until;
  }
  return {at.epoch,
          at.position,
          std::move(at.owed),
          *segments.back().live,
          *segments.back().shares,
          std::move(at.owed_epochs)};
}

}  // namespace

DataPosition PositionAfter(uint64_t steps, int world_size,
                           const std::vector<MembershipChange>& changes, uint64_t dataset_size,
                           uint64_t batch) {
  const StepData at = Walk(steps, world_size, changes, dataset_size, batch, false, "PositionAfter");
  return {at.epoch, at.position};
}

StepData StepDataAt(uint64_t step, int world_size, const std::vector<MembershipChange>& changes,
                    uint64_t dataset_size, uint64_t batch) {
  return Walk(step, world_size, changes, dataset_size, batch, true, "StepDataAt");
}

std::vector<uint64_t> StepData::PositionsOf(int rank, uint64_t batch, uint64_t dataset_size) const {
  return PositionsIn({epoch, position, owed, owed_epochs}, live, shares, rank, batch, dataset_size);
}

std::vector<uint64_t> StepData::EpochsOf(int rank, uint64_t batch) const {
  const Place at{epoch, position, owed, owed_epochs};
  std::vector<uint64_t> out;
  for (uint64_t j : SlotsIn(live, shares, rank, batch)) out.push_back(SlotEpoch(at, j));
  return out;
}

std::vector<size_t> DistributedSampler::At(const std::vector<uint64_t>& positions) const {
  std::vector<size_t> out;
  out.reserve(positions.size());
  for (uint64_t p : positions) out.push_back(order_[p % size_]);
  return out;
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
