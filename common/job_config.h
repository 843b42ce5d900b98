// JobConfig: the job spec een-launch reads from --config job.yaml and its
// flags (flags win). Every field has a default; an unknown field or a bad
// value is an InvalidArgument naming the field and the fix. A plain value.
#pragma once

#include <chrono>
#include <string>

#include "common/shard_map.h"
#include "common/status.h"

namespace een {

// Why a process that needs the parameter servers cannot join a --ps 0 job.
inline constexpr const char* kWithoutPsRefusal =
    "this job runs without parameter servers (een-launch --ps 0): een.DataParallel and "
    "init_process_group(\"een\") need them; start the job with --ps N (N >= 1), or train "
    "with a backend of torch's own (gloo, nccl)";

struct JobConfig {
  int ps = 1;
  int workers = 1;
  int min_workers = 0;   // training goes on while this many workers live; 0: all of them
  int max_restarts = 0;  // replacements een-launch starts for lost workers (they join live)
  int spare_ps = 0;      // standby PS processes that take over a lost PS's rank first
  std::chrono::milliseconds failover_threshold{500};
  // When silence means lost: "adaptive" (the threshold, raised up to 3x for a
  // process whose heartbeats come irregularly on a busy machine) or "fixed"
  // (exactly the threshold).
  std::string liveness = "adaptive";
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds startup_timeout{120000};
  std::chrono::milliseconds progress_interval{2000};
  // A step waiting this long for a worker's gradients ends the job naming
  // the worker (torch.distributed's default collective timeout is 30 min).
  std::chrono::milliseconds step_timeout{30 * 60 * 1000};
  // Data plane: tcp | ipc | shm | auto (the default: shm within a host,
  // tcp between hosts, per pair). `transport_set`: given in the file or on
  // the command line.
  std::string transport = "auto";
  bool transport_set = false;
  std::string wire_dtype = "fp32";  // gradients and parameters on the wire: fp32 | bf16 | fp16
  std::string consistency = "bsp";  // bsp | ssp:K | async (common/consistency.h)
  // off | auto: the coordinator gives each worker a share of the global
  // batch in proportion to its measured speed (bsp only).
  std::string dynamic_slicing = "off";
  std::string host = "127.0.0.1";
  ShardingOptions sharding;
  int replicas = 1;             // copies of each shard: 1 (loss -> rollback) or 2 (failover)
  uint64_t snapshot_every = 0;  // steps between snapshots; 0: none
  std::string snapshot_dir = "een-snapshots";
  bool resume = false;    // start from the newest complete snapshot in snapshot_dir
  bool insecure = false;  // no job secret: any local process may connect (a warning says so)
  // The coordinator serves the job's Prometheus page at
  // http://metrics_host:PORT/metrics; 0: any free port (logged); -1: no page.
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";  // loopback unless told otherwise
  // A file holding a token every scrape must send (Authorization: Bearer);
  // empty: none.
  std::string metrics_token_file;
  // Where the coordinator writes flight records (a step stalled past the
  // failover threshold, the job failed): every process's last steps.
  std::string flight_dir;  // empty: a new private folder /tmp/een-flight-XXXXXX
  // torch.distributed: een-launch hosts the c10d store the workers'
  // init_process_group meets at (MASTER_ADDR:MASTER_PORT) on the
  // coordinator's host, on `master_port` (0: any free port).
  bool c10d_store = true;
  int master_port = 0;

  // Overlays the fields present in the YAML file at `path` onto *this.
  Status LoadYaml(const std::string& path);
  Status Validate() const;
  int MinWorkers() const { return min_workers > 0 ? min_workers : workers; }
};

// "500ms", "2s" or "1.5s"; a bare number is refused (is "2" seconds or
// milliseconds? it once meant 2 ms).
Result<std::chrono::milliseconds> ParseDuration(const std::string& text);

}  // namespace een
