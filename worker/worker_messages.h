// Every message a worker sends, built in one place: one typed function per
// kind, each returning the framed message (header first, then any payload
// frames, which are never copied). The worker client (worker_client.h)
// decides what to say and to whom; these only say it.
// Thread safety: free functions; no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "common/transport/frame.h"
#include "een/optimizer.h"
#include "schema/een.capnp.h"

namespace een::worker_messages {

using transport::Frame;
using transport::Message;

// To the coordinator.
Message Register(int rank, const std::string& host, int pid, const std::vector<TensorInfo>& tensors,
                 const OptimizerConfig& optimizer);
Message MapRequest(int rank);
// `map_epoch`: the worker's shard map (one older than the latest rollback's
// is sent back to redo its steps).
Message Barrier(int rank, uint64_t sequence, uint64_t map_epoch);
Message BatchClaim(int rank, uint64_t sequence, uint64_t step, uint64_t not_before);
Message Done(int rank, uint64_t steps);
// Done, and this worker waits for the job's final values; then: it has them.
Message AwaitFinal(int rank, uint64_t steps);
Message FinalTaken(int rank);

// To a PS (the data plane: no sender; the PS checks `worker` against the
// connection's identity).
struct PushFields {
  uint64_t epoch = 0;  // of the shard map it was routed with
  uint64_t step = 0;
  int worker = 0;
  wire::PushKind kind = wire::PushKind::GRADIENT;
  wire::DType dtype = wire::DType::F32;
  double lr = 0;           // gradients: the step's learning rate (schedules)
  bool again = false;      // sent again after a recovery
  uint64_t pull_back = 0;  // a pull of the step's result rides on it (0: none)
};
// `payload`: one frame per chunk of `chunks`, in that order.
Message Push(const PushFields& fields, const std::vector<uint32_t>& chunks,
             std::vector<Frame> payload);

struct PullFields {
  uint64_t epoch = 0;
  uint64_t min_version = 0;
  int worker = 0;
  bool gradients = false;  // sum mode: the mean gradient, not the values
  wire::DType dtype = wire::DType::F32;
  uint64_t request_id = 0;
  bool frozen_values = false;    // frozen chunks' values too (the first pull)
  bool parked = false;           // ssp: see wire::Pull.parked
  bool optimizer_state = false;  // a checkpoint: see wire::Pull.optimizerState
  bool final_values = false;     // see wire::Pull.finalValues
  bool again = false;            // see wire::Pull.again
};
Message Pull(const PullFields& fields, const std::vector<uint32_t>& chunks);

Message NormQuery(int worker, uint64_t epoch, uint64_t step, uint64_t request_id);

// The een backend: one part of a collective call (schema Reduce); `data`
// travels in place, held by `owner` until sent.
struct ReduceFields {
  int worker = 0;
  uint32_t group = 0;
  uint64_t seq = 0;
  int32_t rank = 0, contributors = 0, root = 0;
  wire::ReduceOp op = wire::ReduceOp::SUM;
  wire::ElementType dtype = wire::ElementType::F32;
  uint64_t offset = 0, numel = 0, total = 0;
  std::vector<int32_t> members;  // empty: group rank r is worker r
};
Message Reduce(const ReduceFields& fields, const void* data, size_t bytes,
               std::shared_ptr<const void> owner);
Message ClipNorm(int worker, uint64_t epoch, uint64_t step, double total_norm);
// eenctl status --probe: `bytes` of probe payload for a PS to confirm.
Message Probe(int worker, uint64_t round, size_t bytes);

}  // namespace een::worker_messages
