#include "common/transport/rdma/rdma_probe.h"

#include <cerrno>
#include <cstring>

#ifdef EEN_WITH_RDMA
#include <infiniband/verbs.h>
#endif

namespace een::transport {

std::string DescribeRdmaDevices() {
#ifdef EEN_WITH_RDMA
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list)
    return std::string("RDMA: no device (ibv_get_device_list: ") + std::strerror(errno) + ")";
  std::string names;
  for (int i = 0; i < n; ++i) names += (i ? ", " : "") + std::string(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  if (n == 0) return "RDMA: no device found";
  return "RDMA: " + std::to_string(n) + " device(s): " + names + " (verbs data path not built yet)";
#else
  return "RDMA: not built (rdma-core was not found at build time)";
#endif
}

}  // namespace een::transport
