// The /metrics page: a JobStatus (schema/een.capnp) in Prometheus' text
// exposition format (version 0.0.4), for the whole job:
//   een_step, een_samples_per_second, een_uptime_seconds, een_map_epoch,
//   een_sync_seconds (histogram), een_failovers_total,
//   een_membership_changes_total, een_workers_lost_total,
//   een_coordinator_refused_messages_total, een_waiting_step_seconds;
//   per process (labels role, rank, host): een_process_up,
//   een_process_cpu_ratio, een_process_resident_bytes,
//   een_process_heartbeat_age_seconds, een_process_step,
//   een_worker_compute_seconds, een_worker_straggler_score, and each
//   counter or gauge the process sends (een_ps_push_bytes_total, ...);
//   per PS (label rank): een_ps_shard_chunks and een_ps_shard_bytes (label
//   kind=primary|backup), een_ps_replication_lag_steps;
//   per host pair (labels from, to): een_link_bytes_per_second.
// Label values are escaped; names a process sends are [a-z0-9_.] already
// (metrics.h), dots become underscores.
#pragma once

#include <string>

#include "schema/een.capnp.h"

namespace een {

std::string PrometheusText(wire::JobStatus::Reader status);

}  // namespace een
