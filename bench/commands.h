// een-bench's commands; each prints a report and returns the exit status
// (0 ok, 1 a run failed, 2 bad input).
#pragma once

#include <string>

namespace een::bench {

// replay: a trace through the runtime (launched as a job) and, in the same
// run, through the references (raw ZeroMQ, memcpy, gloo). See een_bench.cc.
struct ReplayOptions {
  std::string trace_path;
  int ps = 1, workers = 1, steps = 20, warmup = 3;
  std::string dtype = "fp32";       // on the wire
  std::string transport = "tcp";    // tcp | ipc | shm
  size_t bucket_bytes = 25u << 20;  // 1: every chunk pushed alone (no coalescing)
  bool references = true;           // false: only the runtime
  int rounds = 1;                   // runtime + references, repeated
  // > 0: each round also runs the job with a buffer of this many floats
  // broadcast from rank 0 every step (DataParallel's default for BatchNorm
  // statistics), and prints what that costs against the job without it.
  size_t buffer_floats = 0;
  // Each round also runs the job with `een-launch --insecure` (no job
  // secret) and prints what authentication costs.
  bool compare_insecure = false;
  bool compare_encrypted = false;
  // Each round also runs the job with EEN_FLIGHT_RECORDER=off and prints
  // what recording every process's data-path events costs.
  bool compare_flight_recorder = false;
};
int RunReplay(const ReplayOptions& options);

// apply: the PS's aggregation + optimizer step over a trace's chunks, on
// 1..N apply threads, against memcpy of the same bytes on one core.
struct ApplyOptions {
  std::string trace_path;
  int workers = 1;  // gradients summed per chunk
  int threads = 2;  // the most apply threads tried
  int steps = 10;
};
int RunApply(const ApplyOptions& options);

}  // namespace een::bench
