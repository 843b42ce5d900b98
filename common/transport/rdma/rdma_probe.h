// RDMA device discovery. The verbs data path itself is not built yet: this
// probe lets every role say, in one log line, whether a device exists and
// why the ZeroMQ path is used instead. Thread safety: callable from any thread.
#pragma once

#include <string>

namespace een::transport {

// "RDMA: <n> device(s): mlx5_0, ..." or "RDMA: no device (<reason>)".
std::string DescribeRdmaDevices();

}  // namespace een::transport
