// BatchShares: which share of each step's global batch every worker trained
// (--dynamic-slicing), and so how much its gradient weighs in the step's
// mean.
//
// Each committed membership says, from its step on, each live worker's
// samples of the global batch (MembershipChange::shares; empty: equal
// shares). The gradients that make version v were trained under the newest
// membership whose step is below v (the workers learn it with the pull of
// that step's version, and train the next step by it). A worker's gradient
// is the mean over its own samples, so the step's mean over the global
// batch is sum_k n_k g_k / sum_k n_k: with the contributions summed in rank
// order and divided by their count (as for equal shares), gradient k is
// multiplied by n_k * count / sum_k n_k first. Equal shares weigh exactly
// 1, so the result is bitwise that of plain BSP.
// Thread safety: none; the PS's thread owns it (through its ChunkStore).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "een/membership.h"

namespace een::ps {

class BatchShares {
 public:
  // A committed membership (from the job's start, a commit or the history
  // a PS starting mid-job is told). Checks the shares: one per live
  // worker, each at least 1, a sum that fits 31 bits.
  Status Add(const MembershipChange& change);
  // The weights of the contributions of `workers` (ascending ranks) to the
  // step that makes `version`; empty when they weigh the same (equal
  // shares, or a worker without a share: it joined after the shares were
  // given, and every gradient counts as one).
  std::vector<float> Weights(uint64_t version, const std::vector<int>& workers) const;
  // ssp (each gradient applied alone, as 1/N of a step): the weight of
  // `worker`'s gradient of the step that makes `version`, n_w * N / B with
  // N the live workers and B their global batch, so that one gradient from
  // each of them adds up to the global batch's mean; 1 with equal shares.
  float WeightOf(uint64_t version, int worker) const;

 private:
  // The newest membership whose step is below `version`, if any.
  const MembershipChange* InForce(uint64_t version) const;
  // Weights() under the membership `in_force` (null: none known).
  static std::vector<float> WeightsUnder(const MembershipChange* in_force,
                                         const std::vector<int>& workers);
  std::vector<MembershipChange> changes_;  // ascending steps; only the newest few
};

}  // namespace een::ps
