// Host pinning with the CUDA runtime: cudaHostRegister (portable, so any
// device may copy from it; the memory stays where it is, a shared segment
// included).
#include <cuda_runtime_api.h>

#include <string>

#include "worker/device/host_pinning.h"

namespace een {

Status PinHostMemory(void* data, size_t bytes) {
  const cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clears the (not sticky) error, so later CUDA calls do not see it
  return Unavailable("cudaHostRegister of " + std::to_string(bytes) +
                     " bytes: " + cudaGetErrorString(e));
}

void UnpinHostMemory(void* data) {
  if (cudaHostUnregister(data) != cudaSuccess) cudaGetLastError();
}

}  // namespace een
