// JobEnvironment: how a role started by een-launch (or any scheduler) finds
// its job. Every field comes from an EEN_* environment variable; the launcher
// sets them all. A program started without them gets an error that says how
// to start it. A plain value type.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wire_dtype.h"

namespace een {

struct JobEnvironment {
  std::string coordinator;             // EEN_COORDINATOR, e.g. tcp://127.0.0.1:5555
  std::string role;                    // EEN_ROLE: ps | worker
  int rank = -1;                       // EEN_RANK
  int world_size = 0;                  // EEN_WORLD_SIZE: number of workers
  int num_ps = 0;                      // EEN_NUM_PS
  std::string host = "127.0.0.1";      // EEN_HOST: address data listeners bind to
  std::string data_transport = "tcp";  // EEN_DATA_TRANSPORT: tcp | ipc | shm | auto | mem
  std::string run_dir = "/tmp";        // EEN_RUN_DIR: ipc socket folder
  std::chrono::milliseconds failover_threshold{500};  // EEN_FAILOVER_THRESHOLD_MS
  std::chrono::milliseconds heartbeat_interval{100};  // EEN_HEARTBEAT_MS
  std::chrono::milliseconds startup_timeout{120000};  // EEN_STARTUP_TIMEOUT_MS
  std::chrono::milliseconds step_timeout{1800000};    // EEN_STEP_TIMEOUT_MS: a pull's longest wait
  std::string snapshot_dir;     // EEN_SNAPSHOT_DIR: PS snapshots go to DIR/ps-RANK
  uint64_t snapshot_every = 0;  // EEN_SNAPSHOT_EVERY: steps between snapshots (0: none)
  bool resume = false;          // EEN_RESUME=1: start from the newest complete snapshot
  bool spare = false;           // EEN_SPARE=1: a standby PS (takes a lost PS's rank)
  WireType wire_type =
      WireType::kF32;  // EEN_WIRE_DTYPE: fp32 | bf16 | fp16 (workers' pushes and pulls)

  // Tuning and diagnostics, all optional (the launcher passes them through):
  uint64_t bucket_bytes = 0;   // EEN_BUCKET_BYTES: a worker's gradient buckets (0: the program's)
  uint64_t message_bytes = 0;  // EEN_MESSAGE_BYTES: most wire bytes in a push message (0: no limit)
  bool pull_back = true;       // EEN_PULL_BACK=0: no pull streamed back per pushed bucket
  std::string timeline;        // EEN_TIMELINE=PREFIX: a worker writes PREFIX.worker-RANK.json
  std::string trace_record;    // EEN_TRACE_RECORD=FILE: worker 0 records its gradients' order
  int ps_threads = 0;          // EEN_PS_THREADS: a PS's apply threads (0: cores, at most 8)
  uint64_t resources_at_step = 0;  // EEN_RESOURCES_AT_STEP: a PS logs its resource use there

  // Reads the environment; `program` names the caller in the error message.
  static Result<JobEnvironment> FromProcess(const std::string& program);
  // The data-plane addresses for this process to listen on ("tcp://host:0",
  // ...; for "auto" a tcp one, then a same-host shm one).
  std::vector<std::string> DataListenAddresses() const;
};

// Sets this process's transport credentials (transport/auth.h),
// authenticating as `identity`: from EEN_JOB_CREDENTIAL_FILE (its own
// credential, which een-launch writes for each worker; an error if it is
// another identity's), else from EEN_JOB_SECRET_FILE; with EEN_INSECURE=1
// instead, none (and a warning). None set: an error saying how to get the
// secret. Call before the first connection.
Status AuthenticateAs(const std::string& identity, const std::string& program);

// EEN_LOCAL=1: a training program run by hand (no een-launch, no
// EEN_COORDINATOR) trains in its own process as the only worker, for
// debugging. Ok(false) when unset or 0; an error for any other value.
Result<bool> LocalModeRequested();

// This process's host, as the job names it: EEN_NODE when its launcher set
// it (per-node launch names each node, since simulated hosts may share a
// host name), else the machine's host name. Placement and pid lookups use it.
std::string HostName();

}  // namespace een
