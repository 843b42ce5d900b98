// Host pinning in a build without CUDA: nothing can be pinned.
#include "worker/device/host_pinning.h"

namespace een {

Status PinHostMemory(void*, size_t) {
  return FailedPrecondition(
      "this EEN was built without CUDA (no CUDA toolkit or a CPU-only LibTorch at configure "
      "time): host buckets cannot be pinned, so device copies are synchronous");
}

void UnpinHostMemory(void*) {}

}  // namespace een
