// ElasticNodes: an elastic per-node launch (een-launch --nnodes MIN:MAX
// --ps-per-node P --workers-per-node W). The rendezvous closes once MAX
// nodes met the coordinator, or once MIN did and `last_call` passed without
// another; those nodes start the job, with ranks node-rank-major among
// them. A node that comes later (up to MAX in all) joins the running job:
// its workers as new workers (at a step every PS agrees on), its PS one
// after the other as new PS (shards move to them while training goes on).
// A plain value type; `min` 0 means a fixed node count.
#pragma once

#include <chrono>

namespace een {

struct ElasticNodes {
  int min = 0;
  int max = 0;
  int ps_per_node = 0;
  int workers_per_node = 0;
  std::chrono::milliseconds last_call{10000};

  bool enabled() const { return min > 0; }
};

}  // namespace een
