// RawExchange: the transport ceiling for een-bench. The same bytes, split
// the same way between servers, through plain ZeroMQ DEALER/ROUTER sockets
// with zero-copy frames and nothing else, set up as EEN sets up its own
// (no high-water marks, glibc keeping freed receive buffers for
// the next step, one heap): each of W client processes sends every server
// its share of a step (one frame per chunk) in pieces of at most
// `bucket_bytes`, as a worker pushes buckets; each server answers a piece
// to every client once all W sent it (the "pull", overlapped with the
// pushes as EEN's pull-backs are), which the client copies into its
// buffer, as a worker does.
// Thread safety: call from a single-threaded process (it forks).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace een::bench {

struct RawExchangeOptions {
  std::vector<std::vector<size_t>> chunk_bytes;  // per server: the sizes of its chunks
  int workers = 1;
  size_t bucket_bytes = 25 << 20;  // the most one push message carries (0: everything at once)
  int steps = 20, warmup = 3;
  std::string transport = "tcp";  // tcp | ipc
  std::string work_dir;           // for endpoint files and results
};

// Per measured step, each worker's sync time in microseconds (all workers).
Result<std::vector<double>> RunRawExchange(const RawExchangeOptions& options);

}  // namespace een::bench
