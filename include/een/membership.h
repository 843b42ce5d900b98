// MembershipChange: one committed change of which workers train, the one
// membership type of EEN. The coordinator records every change (and keeps
// them next to the snapshots, for --resume); workers receive the history
// when they start and each change with a pull; the sampler positions data
// by them (sampler.h); DataParallel::membership_changes() returns them.
// A plain value.
#pragma once

#include <cstdint>
#include <vector>

namespace een {

// The most steps ahead of the one it trains that a worker's loop may draw
// its data for the job to keep every epoch exact (a DataLoader prefetches
// num_workers * prefetch_factor batches); changes take effect at most this
// far past their step.
constexpr uint64_t kMaxDataLookAhead = 64;

// A worker lost with steps it did not finish: from `from_step` to the
// change's step its gradients are missing from at least one chunk (the job
// went on without them), so its batches of those steps (and of the steps to
// the change's data_step, see below) were not trained.
// The sampler owes them: the live workers draw them first (sampler.h).
struct UnfinishedSteps {
  int worker = 0;
  uint64_t from_step = 0;
  bool operator==(const UnfinishedSteps& o) const {
    return worker == o.worker && from_step == o.from_step;
  }
};

// From step `step` on, the workers `live` train (a worker was lost, or a
// replacement joined, or --dynamic-slicing gave them new shares of the
// global batch); committed as membership epoch `epoch` (0: the start).
// The data follow from `data_step` on (layout_step()): a DataLoader that
// draws batches ahead (num_workers > 0) had drawn the steps before it in
// the old layout when the change was heard, so the old layout holds for
// them, a lost worker's batches among them owed (unfinished, up to it).
// (In this order, so the older {step, live_count} form does not compile.)
struct MembershipChange {
  uint64_t step = 0;
  std::vector<int> live;  // ascending worker ranks
  uint64_t epoch = 0;
  // --dynamic-slicing: each live worker's samples of the global batch, in
  // `live`'s order (their sum is the global batch); empty: equal shares.
  std::vector<uint32_t> shares;
  // The workers lost at this change, and the steps they left unfinished.
  std::vector<UnfinishedSteps> unfinished;
  uint64_t data_step = 0;  // the first step whose data follow the change (0: `step`)
  int live_count() const { return static_cast<int>(live.size()); }
  uint64_t layout_step() const { return data_step > step ? data_step : step; }
};

}  // namespace een
