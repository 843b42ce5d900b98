// Every message a PS sends, built in one place: one typed function per
// kind, each returning the framed message (header first, then any payload
// frames, which are never copied). The PS (parameter_server.h,
// replication.cc) decides what to say and to whom; these only say it.
// Thread safety: free functions; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/frame.h"
#include "een/membership.h"
#include "schema/een.capnp.h"

namespace een::ps_messages {

using transport::Frame;
using transport::Message;

// What a PS found in its snapshot folder when it opened it.
struct SnapshotsFound {
  std::vector<uint64_t> intact;   // resuming: the steps it holds intact, newest first
  std::string problem;            // resuming with none intact: why
  bool none = false;              // resuming: the folder holds no snapshot at all
  std::vector<uint64_t> earlier;  // not resuming: steps an earlier run left there
};

// To the coordinator.
Message Register(int rank, const std::string& host, int pid, const std::string& data_address,
                 const std::string& local_address, bool spare, const SnapshotsFound& snapshots);
Message Hello(int rank);  // to a restarted coordinator: here is this PS's control connection
Message Leave(int rank);
// To the coordinator: end the job for `reason` (a worker's NaN or infinite gradient).
Message Fault(int rank, const std::string& reason);
Message ProbeReply(int rank, uint64_t round, int worker);  // eenctl status --probe
// `unfinished`: bsp, each lost worker's first step missing here.
Message MembershipPrepared(int rank, uint64_t epoch, uint64_t max_version,
                           const std::vector<UnfinishedSteps>& unfinished);
Message RolledBack(int rank, uint64_t epoch, uint64_t step);

// To a worker.
// `payload`: one frame per chunk of `chunks`, in that order.
struct PullReplyFields {
  uint64_t request_id = 0;
  wire::DType dtype = wire::DType::F32;
  uint64_t version = 0;  // the oldest version among the chunks
  // The newest membership this PS follows (not copied: a pull answer is
  // on the hot path).
  uint64_t membership_epoch = 0;
  uint64_t membership_step = 0;
  uint64_t membership_data_step = 0;  // its data_step (0: membership_step)
  const std::vector<int>* live_workers = nullptr;
  const std::vector<uint32_t>* batch_shares = nullptr;       // null or empty: equal shares
  const std::vector<UnfinishedSteps>* unfinished = nullptr;  // its lost workers' (or null)
  uint64_t slowest = 0;    // ssp/async: the fewest steps a live worker applied to these chunks
  uint64_t own_steps = 0;  // ssp/async: the fewest of the asking worker's steps they hold
  // A checkpoint pull (wire::Pull.optimizerState): each chunk's version, and
  // the optimizer state slots a parameter chunk's frame carries.
  const std::vector<uint64_t>* versions = nullptr;
  uint32_t state_slots = 0;
};
Message PullReply(const PullReplyFields& fields, const std::vector<uint32_t>& chunks,
                  std::vector<Frame> payload);
// This PS's share of a step's gradient norm: `total_norm` once applied,
// else each chunk's sum of squares.
struct NormReplyFields {
  uint64_t request_id = 0;
  uint64_t step = 0;
  bool applied = false;
  double total_norm = 0;
};
Message NormReply(int rank, const NormReplyFields& fields, const std::vector<uint32_t>& chunks,
                  const std::vector<double>& sum_squares);

// To a backup PS (`answer`: the backup's confirmation, without payload).
struct ReplicateFields {
  uint64_t epoch = 0;
  int from = 0;         // the sending PS
  bool image = false;   // whole chunk images (a new backup), not a step's mean gradients
  bool answer = false;  // Replicated (confirmation), not Replicate
};
// `lrs`, `norms`: each step's learning rate and clipping norm (mean gradients).
Message Replicate(const ReplicateFields& fields, const std::vector<uint32_t>& chunks,
                  const std::vector<uint64_t>& versions, const std::vector<double>& lrs,
                  const std::vector<double>& norms, std::vector<Frame> payload,
                  const std::vector<int32_t>& workers = {},
                  const std::vector<uint64_t>& worker_steps = {});

// The een backend: the result of a collective part (the frame `result`,
// shared, not copied), or why it failed; `absent`: the group ranks lost
// before sending their part (the result is over the others).
Message ReduceReply(int rank, uint32_t group, uint64_t seq, uint64_t offset,
                    const std::string& error, const Frame& result,
                    const std::vector<int32_t>& absent);

}  // namespace een::ps_messages
