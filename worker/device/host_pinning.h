// Page-locking host memory that already exists (gradient buckets, which on
// the shared-memory transport are the shared segments themselves), so that
// device copies into and out of it are asynchronous DMA: cudaHostRegister
// in a build with CUDA (host_pinning_cuda.cc), refused otherwise
// (host_pinning_none.cc). Free functions; thread-safe.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace een {

// Pins [data, data + bytes); an error says why (no CUDA in this build, no
// device, the driver refused).
Status PinHostMemory(void* data, size_t bytes);
// Undoes PinHostMemory (before the memory is freed).
void UnpinHostMemory(void* data);

}  // namespace een
