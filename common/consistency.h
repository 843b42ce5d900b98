// Consistency: how far workers' steps may drift apart (--consistency).
//
// bsp: every step waits for every live worker's gradient; the PS applies
//   their mean once (bitwise reproducible).
// ssp:K (K >= 1): each gradient is applied when it arrives, and a worker may
//   start step t only once every live worker has completed step t-K (its
//   pull waits for that); ssp:1 keeps BSP's pace.
// async: each gradient is applied when it arrives; a pull returns the newest
//   values at once.
// In ssp and async each arriving gradient is applied as its worker's share
// of a BSP step (the per-worker mean contribution): one optimizer step on
// it at learning rate / live workers, so one gradient from each of N
// workers moves the values about as far as one BSP step would (with SGD
// exactly as the mean of those gradients, from staler values). Adam and
// AdamW take learning rate / sqrt(live workers) instead: they divide each
// step by its gradient's root mean square, which one worker's batch (1/N
// of BSP's) makes about sqrt(N) times noisier (the square-root scaling
// rule for adaptive optimizers). Their first moment's beta1 is lowered by
// the momentum the asynchrony itself adds, 1 - 1/N for N workers
// (Mitliagkas et al., "Asynchrony begets momentum"): PerArrivalBeta1.
// Neither mode is reproducible run to run.
// A plain value.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace een {

struct Consistency {
  enum class Kind { kBsp, kSsp, kAsync };
  Kind kind = Kind::kBsp;
  uint64_t staleness = 0;  // ssp: K

  static Result<Consistency> Parse(const std::string& text);
  std::string Name() const;  // as parsed: "bsp", "ssp:2", "async"
  // Gradients are applied one by one as they arrive (ssp and async).
  bool per_arrival() const { return kind != Kind::kBsp; }
  // ssp: a worker at step t (pulling version t) may go on once every live
  // worker has completed `completed` steps, i.e. step t-K: completed + K > t
  // (UINT64_MAX: no worker holds it back).
  bool Allows(uint64_t t, uint64_t slowest_completed) const {
    return kind != Kind::kSsp || slowest_completed >= t || slowest_completed + staleness > t;
  }
};

// Adam/AdamW's beta1 under ssp/async with `workers` workers: beta1 less the
// implicit momentum of N workers' stale gradients, 1 - 1/N, and at least 0
// (0.9 with 4 workers: 0.15; with 1 worker unchanged). SGD's momentum is
// kept: there it also sets the step's size, lr / (1 - momentum).
double PerArrivalBeta1(double beta1, int workers);

}  // namespace een
