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

// A worker lost with steps it did not finish: from `from_step` to the
// change's step its gradients are missing from at least one chunk (the job
// went on without them), so its batches of those steps were not trained.
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
  int live_count() const { return static_cast<int>(live.size()); }
};

}  // namespace een
