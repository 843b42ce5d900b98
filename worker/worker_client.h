// WorkerClient: a worker's side of the protocol, on raw float buffers
// (no LibTorch here; een::DataParallel builds on it).
//
// Join() also keeps large freed buffers in the heap (mallopt; pulls then
// reuse their pages each step; EEN_KEEP_FREED_MEMORY=0 turns this off).
// Join() registers with the coordinator (model tensors and optimizer), waits
// for the job to start, connects to every PS and starts heartbeats. Push()
// sends chunks zero-copy: the memory behind `owner` must stay unchanged until
// a later Pull() of a newer version returns (the PS has then consumed it).
// Each PS's share of a push goes in one message, or in messages of at most
// EEN_MESSAGE_BYTES when that is set (as BytePS partitions tensors).
// Pull() asks every PS for its chunks and writes each chunk, as its reply
// arrives, to where `destination` says (numel floats). A gradient push also
// asks its PS to send those chunks back once the step is applied (pull-back,
// EEN_PULL_BACK=0 turns it off): the replies stream in while later buckets
// are still being pushed, and Pull(step + 1) asks only for what no push
// covered.
// With a bf16/fp16 wire (EEN_WIRE_DTYPE) pushes are converted (rounded as
// torch rounds) into pooled buffers and pulls are widened back to fp32. Every wait checks the job
// state from the heartbeats, so a job aborted elsewhere (a lost PS) ends the wait with Aborted and
// the reason. Thread safety: one thread at a time (DataParallel serialises its calls).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "common/consistency.h"
#include "common/flight_recorder.h"
#include "common/heartbeat_sender.h"
#include "common/job_env.h"
#include "common/metrics.h"
#include "common/shard_map.h"
#include "common/transport/device.h"
#include "common/wire.h"
#include "een/optimizer.h"
#include "een/sampler.h"
#include "worker/worker_messages.h"

namespace een {

class WorkerClient {
 public:
  static Result<std::unique_ptr<WorkerClient>> Join(const JobEnvironment& env,
                                                    std::vector<TensorInfo> tensors,
                                                    const OptimizerConfig& optimizer);
  ~WorkerClient();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const ShardMap& map() const { return map_; }
  bool sum_mode() const { return optimizer_.kind == OptimizerConfig::Kind::kSum; }
  const OptimizerConfig& optimizer() const { return optimizer_; }
  // Resuming from a snapshot: the PS hold step start_step()'s values already.
  bool resumed() const { return resumed_; }
  // Joining a running job (a replacement or a late worker) at start_step().
  bool joining() const { return joining_; }
  // This worker sends the job's starting values: worker 0 of a job that
  // starts, and a worker 0 that joins the running job (the lost one may
  // have died before it sent them all; the PS keep any they hold).
  bool sends_initial_values() const { return rank_ == 0 && (!resumed_ || joining_); }
  uint64_t start_step() const { return start_step_; }
  const Consistency& consistency() const { return consistency_; }
  // ssp/async: how many steps the slowest live worker was behind this one
  // in the last pull's answers (0 under bsp).
  uint64_t Staleness() const;
  // ssp/async: the fewest of this worker's own steps the PS hold, from the
  // last pull's answers. After a resume each worker takes up there (the
  // snapshot's step is its slowest worker's; a faster one got further).
  uint64_t OwnSteps() const { return own_steps_; }
  // The workers that train now (a lost one drops out at an agreed step),
  // and this worker's place among them: its share of the data.
  const std::vector<int>& live_workers() const { return live_workers_; }
  // The changes in force (their step reached), and those known (heard, maybe in force from a
  // later step: the data a loop draws ahead follow them).
  const std::vector<MembershipChange>& membership_changes() const { return changes_; }
  std::vector<MembershipChange> known_changes() const {
    std::vector<MembershipChange> known = changes_;
    known.insert(known.end(), upcoming_.begin(), upcoming_.end());
    return known;
  }
  int live_index() const;
  // --dynamic-slicing: the job gives each live worker a share of every
  // step's global batch (in live_workers() order; empty: equal shares).
  bool dynamic_slicing() const { return dynamic_slicing_; }
  // The batch size the job's samplers draw per worker and step (JobSampler):
  // the job's, or this worker's once noted (heartbeats tell the job); 0: not
  // known yet.
  uint64_t data_batch() const { return data_batch_.load(); }
  void NoteDataBatch(uint64_t batch) { data_batch_ = batch; }
  // The most steps past the one it trains that this worker's loop drew its
  // data (heartbeats tell the job: changes of the data's layout take effect
  // past the job's largest).
  void NoteDataLookAhead(uint64_t steps) {
    if (steps > data_look_ahead_.load()) data_look_ahead_ = steps;
  }
  const std::vector<uint32_t>& batch_shares() const { return shares_; }
  // The slice of step `step` (0-based: the steps completed before it) of a
  // global batch of `global_batch` samples: the first sample (offset) and
  // how many, by the newest membership change at or before that step (so
  // a step trained again after a rollback takes the slice it had). Equal
  // shares without --dynamic-slicing (or before the first shares).
  // Fails if the shares sum to another global batch (the workers disagree
  // on the batch size). Noted for the heartbeat's speed measurement.
  struct Slice {
    uint64_t offset = 0, count = 0;
  };
  Result<Slice> SliceOf(uint64_t global_batch, uint64_t step);

  // Buffer chunks always travel as fp32 (values, not gradients); a frozen
  // chunk's step push carries no bytes (its data pointer may be null).
  // Initial values (worker 0) are also kept, not copied: `owner` is held
  // until a pull of step 1 succeeds, and the values it owns must not change
  // until then. A PS lost before its backups held them gets them again
  // from Recover(), and the job goes on as if nothing had happened.
  Status Push(wire::PushKind kind, uint64_t step, const std::vector<uint32_t>& chunks,
              const std::vector<const float*>& data, const std::shared_ptr<const void>& owner);
  // Frozen chunks (they never change after the start) are only waited for
  // (the PS answers them empty), unless `frozen_too` (joining, after a rollback).
  Status Pull(uint64_t min_version, bool gradients,
              const std::function<float*(uint32_t chunk)>& destination, bool frozen_too = false);
  // A checkpoint: every chunk's fp32 values and, for a parameter chunk, the
  // server optimizer's state slots (not in sum mode), once each chunk has
  // reached `min_version` (under ssp/async: this worker's steps). Each PS
  // copies its chunks at one moment. `take` gets each chunk, its version
  // (steps applied) and numel * (1 + slots) floats: the values, then each
  // slot in the optimizer's order (slots is 0 for buffers and frozen chunks).
  using StateTaker =
      std::function<Status(uint32_t chunk, uint64_t version, const float* data, uint32_t slots)>;
  Status PullState(uint64_t min_version, const StateTaker& take);
  static constexpr uint32_t kMaxStateSlots = 4;  // Adam's two, with room
  // Starting from a checkpoint (worker 0, before the job's first step):
  // `chunks[c]` holds chunk c's values and, for a parameter chunk, its
  // optimizer state slots (PullState's layout); each primary takes them as
  // step `step` (the optimizer steps they hold), and its backup an image.
  // `again`: sent once more after a PS was lost; chunks that have them
  // already are skipped. Pull(step) then waits until every chunk holds them.
  using ChunkStates = std::vector<std::vector<float>>;
  Status PushState(uint64_t step, std::shared_ptr<const ChunkStates> chunks, bool again);
  // Zero-filled memory for `numel` gradients to push: where the data plane
  // sends it in place (shm), allocated by its device (Device::Allocate), so
  // pushes from it are not copied at all; otherwise on the heap.
  Result<std::shared_ptr<float>> GradientBuffer(size_t numel);
  // The een backend (een/process_group.h; worker_client_collectives.cc):
  // one collective call, split in parts, each sent to the PS collective_ps()
  // names for it. CollectiveSend() sends them. Then, polled: while
  // CollectiveReceive() sets aside the answers that came for any call in
  // flight, CollectiveTake() hands a call's answered parts to its `take`
  // (the bytes live only during that call) and says when every part was
  // answered, with the group ranks absent from the result (lost, the job
  // going on without them) in `absent`. Later calls may be sent before an
  // earlier one is answered (they travel while it is reduced), and the
  // calls of different groups are answered independently; a group's calls
  // complete in the order they were sent. `data` of each part stays
  // unchanged until its call completed. With replicas (--replicas 2) each
  // part goes to two PS, both reduce it in rank order, and the first answer
  // counts: a PS lost meanwhile changes nothing. A part whose every copy was
  // lost fails its call, saying so.
  struct CollectivePart {
    std::vector<size_t> ps;            // its copies (collective_ps())
    std::vector<uint64_t> generation;  // of each one's connection, when sent
    uint64_t offset = 0, numel = 0;
    const void* data = nullptr;
    size_t bytes = 0;
    std::shared_ptr<const void> owner;  // keeps `data` alive while the transport sends it
  };
  using CollectiveTaker = std::function<Status(const CollectivePart&, const transport::Frame&)>;
  struct CollectiveCall {
    worker_messages::ReduceFields call;
    std::vector<CollectivePart> parts;
    CollectiveTaker take;
    std::vector<bool> answered;   // per part (CollectiveTake)
    std::vector<int32_t> absent;  // group ranks missing from the answers taken
    std::chrono::steady_clock::time_point since{}, next_warning{};  // CollectiveReceive's
  };
  // The PS that hold a part whose first copy is on PS `p`: p, and with
  // replicas the next PS too.
  std::vector<size_t> collective_ps(size_t p) const;
  Status CollectiveSend(const worker_messages::ReduceFields& call,
                        std::vector<CollectivePart>& parts);
  // True once every part of `c` was answered and taken.
  Result<bool> CollectiveTake(CollectiveCall& c);
  // Waits up to about `slice` for answers to the calls in flight, `calls`
  // (recovering first when the shard map moved on). Fails for the whole
  // session: the job ended, the PS refused this worker, or a PS lied.
  Status CollectiveReceive(const std::vector<CollectiveCall*>& calls,
                           std::chrono::milliseconds slice);
  // From now on a new shard map keeps the connection of each PS whose
  // address did not change (the een backend: answers on their way still
  // come); the others' connections are new.
  void KeepPsConnectionsAcrossMaps() { keep_ps_connections_ = true; }
  size_t num_ps() const { return ps_.size(); }
  // Gradient clipping (the optimizer's clip_grad_norm > 0), after every
  // gradient of `step` was pushed: asks each PS for its share of the mean
  // gradient's squared norm, and sends every PS the total (the same on every
  // worker), which lets them apply the step. Returns the total norm.
  Result<double> ClipGradients(uint64_t step);
  bool clipping() const { return optimizer_.clip_grad_norm > 0; }
  // The learning rate gradient pushes ask the PS to apply (< 0: the configured one).
  void set_learning_rate(double lr) { lr_ = lr; }
  // Waits until every live worker is at this barrier. kStaleEpoch: a lost
  // PS rolled the job back meanwhile (Recover(), redo the steps from the
  // snapshot, then Barrier() again: it asks for the same barrier).
  Status Barrier();
  // The next batch number of the job nobody has taken (see DataParallel::NextBatch), for this
  // worker's own step `step`.
  Result<uint64_t> ClaimBatch(uint64_t step, uint64_t not_before = 0);
  Status Finish();  // tells the coordinator this worker is done; idempotent
  // Done training, as Finish(), but heartbeats go on and the job does not
  // end before FinalTaken(): AwaitFinal() then waits until every worker
  // finished and returns the step of the job's final values (nullopt: this
  // worker holds them already, or the job ended without them).
  Status FinishAwaitingFinal(uint64_t steps);  // `steps`: this worker's, as Done says
  Result<std::optional<uint64_t>> AwaitFinal();
  Status FinalTaken();
  void StopHeartbeats() { heartbeat_.reset(); }
  // Stops heartbeats without saying done (the program is failing): the
  // coordinator and een-launch see a lost worker, not a finished one.
  void Abandon();

  // Shown by the coordinator's progress line (read by the heartbeat thread).
  // `loss`: none when the program gave none; `compute_micros`: the step's
  // time outside Step() (eenctl status compares workers with it).
  void ReportProgress(uint64_t step, std::optional<double> loss, uint64_t samples,
                      uint64_t sync_micros, uint64_t compute_micros);
  // Where the worker is, for the coordinator: inside Step() (EEN's part of
  // a step) or back in the program's own code (compute, evaluation).
  void EnterStep();
  void LeaveStep();
  // Aborted with the reason when the job has been ended elsewhere.
  Status JobStatus() const;
  // The flight recorder its heartbeat empties (common/flight_recorder.h).
  FlightRecorder& recorder() { return recorder_; }
  // True once the shard map moved on (a PS lost or replaced): pushes and
  // pulls stop, and Recover() must run.
  bool NeedsRecovery() const;
  struct Recovery {
    bool rolled_back = false;  // every PS went back to the snapshot of `step`
    uint64_t step = 0;         // otherwise (a failover) the shards just moved:
                               // resend this step's pushes, pull again
  };
  // Fetches the new map from the coordinator (after a rollback it answers
  // once every PS is back) and reconnects; worker 0, before step 1, then
  // sends its initial values again (the new primaries keep the ones they hold).
  Result<Recovery> Recover();
  // A first pull (joining, or after a rollback) that goes on through a PS
  // lost meanwhile: each time the pull fails because the shard map moved,
  // Recover() and pull again (after a rollback, the step rolled back to), at
  // most `max_recoveries` times. Returns the step whose values it pulled.
  Result<uint64_t> PullRecovering(uint64_t min_version,
                                  const std::function<float*(uint32_t chunk)>& destination,
                                  bool frozen_too, int max_recoveries = 10);

 private:
  WorkerClient(JobEnvironment env) : env_(std::move(env)) {}
  Status ApplyJobStart(wire::JobStart::Reader js);
  Status TakeHistory(const std::vector<MembershipChange>& history);
  Status ConnectToPs();
  // One pull answer from PS `p`: checked against the request it answers,
  // decoded into place; answers to forgotten requests are dropped.
  Status TakePullReply(size_t p, const transport::Message& m, uint64_t min_version,
                       const std::function<float*(uint32_t)>& destination);
  // Receives from PS `p` (first, with `set_aside_first`, what an earlier wait set aside) and hands
  // each message to `take` while `waiting()`; ends early if the job was aborted or the map moved
  // on, and logs every 30 s what it still waits for.
  static constexpr std::chrono::seconds kAskAgainAfter{5};
  // `ask_again`, if given, runs each kAskAgainAfter without an answer: a
  // request lost on the way (it never should be) costs that long, not the job.
  Status WaitForPs(size_t p, const std::function<bool()>& waiting, const std::string& what,
                   const std::function<Status(const transport::Message&)>& take,
                   bool set_aside_first = true, const std::function<Status()>& ask_again = {});
  // The total norm of step `step`'s mean gradient from every PS's shares
  // (ClipGradients' first half).
  Result<double> GatherNorm(uint64_t step);
  // Sends `message` (worker_messages.h) to PS `p`; Unavailable "`what` failed: ...".
  Status Send(size_t p, transport::Message message, const std::string& what);
  // A PS's Error answer as a Status (a stale epoch marks recovery as needed).
  Status PsError(size_t p, wire::Error::Reader error);
  // A membership stamped on a pull answer of `version`, if newer; fails if it
  // no longer includes this worker. Known (known_changes()) at once, in force
  // (membership_changes(), live_workers(), batch_shares()) from its step.
  Status AdoptMembership(wire::Membership::Reader m, uint64_t version);
  void Enforce(uint64_t version);  // the changes heard whose step `version` reached
  // Sends `request` on the control connection and waits for an answer the
  // predicate accepts (other messages are dropped); sends it again if the
  // coordinator restarts meanwhile.
  // With `resend_every`, also sends it again at that period (registration:
  // a coordinator restarted before the job started knows nobody).
  Status Request(const transport::Message& request,
                 const std::function<bool(wire::Header::Reader)>& accept,
                 std::chrono::milliseconds timeout, const std::string& what,
                 std::chrono::milliseconds resend_every = std::chrono::milliseconds(0));

  JobEnvironment env_;
  int rank_ = -1;
  int world_size_ = 0;
  ShardMap map_;
  OptimizerConfig optimizer_;
  std::unique_ptr<transport::Connection> control_;
  std::vector<std::unique_ptr<transport::Connection>> ps_;
  std::vector<uint64_t> ps_generation_;  // per PS: +1 each time its connection is new
  bool keep_ps_connections_ = false;
  // Whether copy k of `part` is still the PS process it was sent to (a PS
  // replaced since never got it).
  bool CopyIsLive(const CollectivePart& part, size_t k) const;
  // Per PS: collective answers that came before their call took them, by
  // (group, seq, offset).
  using CollectiveKey = std::tuple<uint32_t, uint64_t, uint64_t>;
  std::vector<std::map<CollectiveKey, transport::Message>> collective_replies_;
  std::map<uint32_t, uint64_t> collective_done_;  // per group: the last call waited for
  std::string reported_routes_;                   // how each PS is reached, as last logged
  std::vector<std::vector<uint32_t>> ps_chunks_;  // chunk ids held by each PS
  std::vector<int> live_workers_;
  std::vector<MembershipChange> changes_;       // in force (or, joining, told) so far
  std::deque<MembershipChange> upcoming_;       // heard, not in force yet (oldest first)
  std::vector<MembershipChange> join_history_;  // from the first JobStart
  // Pull answers asked for and not yet received (by Pull, or a push's pull-back).
  struct PullRequest {
    uint32_t ps;
    uint64_t id, min_version;
    bool gradients;
    WireType type;  // of the answer's payloads
    std::vector<uint32_t> chunks;
    bool frozen_values = false;  // frozen chunks come with values (else empty: version only)
    std::chrono::steady_clock::time_point sent = std::chrono::steady_clock::now();
  };
  // What chunk `c` travels as: fp32 for buffers, else the job's wire dtype.
  WireType TypeOf(uint32_t c) const {
    return IsBuffer(map_.KindOfChunk(c)) ? WireType::kF32 : env_.wire_type;
  }
  // The dtypes chunks travel in: fp32, and the wire dtype if it is another.
  std::vector<WireType> TypesInUse() const {
    if (env_.wire_type == WireType::kF32) return {WireType::kF32};
    return {WireType::kF32, env_.wire_type};
  }
  std::vector<PullRequest> outstanding_;
  // Per PS: messages that came while another answer was awaited (pull
  // answers during a norm query), taken first by the next wait. At most one
  // step's pull answers.
  std::vector<std::deque<transport::Message>> deferred_;
  // Converted pushes (bf16/fp16 wire): reused once no frame holds them.
  std::vector<std::shared_ptr<std::vector<uint16_t>>> wire_buffers_;
  std::shared_ptr<std::vector<uint16_t>> WireBuffer(size_t numel);
  // One push message to PS `p`: the chunks chunks[i] for i in `indices`.
  Status PushMessage(size_t p, wire::PushKind kind, WireType type, uint64_t step,
                     const std::vector<uint32_t>& chunks, const std::vector<size_t>& indices,
                     const std::vector<const float*>& data,
                     const std::shared_ptr<const void>& owner, bool again);
  Status PushToOwners(wire::PushKind kind, uint64_t step, const std::vector<uint32_t>& chunks,
                      const std::vector<const float*>& data,
                      const std::shared_ptr<const void>& owner, bool again);
  // Worker 0's initial values, until every chunk reached step 1.
  struct InitialValues {
    std::vector<uint32_t> chunks;
    std::vector<const float*> data;  // owned by `owner`, unchanged until step 1
    std::shared_ptr<const void> owner;
  };
  std::optional<InitialValues> initial_;
  uint64_t membership_epoch_ = 0;
  bool dynamic_slicing_ = false;
  std::atomic<uint64_t> data_batch_{0};
  std::atomic<uint64_t> data_look_ahead_{0};
  std::vector<uint32_t> shares_;                 // of the membership in force (see batch_shares())
  uint64_t slice_count_ = 0, slice_global_ = 0;  // the last SliceOf()
  double lr_ = -1;
  bool resumed_ = false;
  bool joining_ = false;
  Consistency consistency_;
  // ssp/async: the version last pulled and the fewest steps a live worker
  // had applied to the chunks answered for it.
  uint64_t slowest_version_ = 0;
  uint64_t slowest_ = 0;
  uint64_t own_steps_ = 0;
  bool stale_seen_ = false;  // a PS refused our map epoch
  uint64_t start_step_ = 0;
  uint64_t rollback_epoch_ = 0;  // of the latest rollback the coordinator told us of
  uint64_t next_request_ = 1;
  uint64_t barrier_sequence_ = 0;
  uint64_t claim_sequence_ = 0;
  bool finished_ = false;
  std::atomic<uint64_t> step_{0}, samples_{0}, sync_micros_{0}, compute_micros_{0};
  // Steady-clock micros when Step() last returned to the program (0: in Step()).
  std::atomic<int64_t> program_since_micros_{0};
  std::atomic<uint64_t> staleness_{0};  // Staleness() at the last ReportProgress
  // The slice the last reported step trained (--dynamic-slicing).
  std::atomic<uint32_t> reported_share_{0}, reported_global_{0};
  std::atomic<double> loss_{0};
  std::atomic<bool> loss_given_{false};
  // What this worker did when (pushes, pull answers; DataParallel adds
  // backward and sync), carried by its heartbeat.
  FlightRecorder recorder_;
  // What this worker measures, carried by its heartbeat (eenctl metrics).
  Metrics metrics_;
  Counter& pushes_ = metrics_.counter("worker.pushes");
  Counter& push_bytes_ = metrics_.counter("worker.push_bytes");
  Counter& pull_replies_ = metrics_.counter("worker.pull_replies");
  Counter& pull_bytes_ = metrics_.counter("worker.pull_bytes");
  Counter& recoveries_ = metrics_.counter("worker.recoveries");
  // Bytes pushed to and pulled from each PS, by PS rank (the heartbeat
  // carries them: traffic between hosts in eenctl status).
  struct PsTraffic {
    uint64_t out = 0, in = 0;
  };
  void CountTraffic(size_t ps, uint64_t out, uint64_t in);
  // What every heartbeat carries (on the heartbeat thread): progress,
  // traffic, probe results.
  void FillHeartbeat(wire::Heartbeat::Builder hb);
  mutable std::mutex traffic_mu_;
  std::vector<PsTraffic> traffic_;  // guarded by traffic_mu_
  // eenctl status --probe: when the coordinator announces a round, a
  // background thread sends kProbeMessages of kProbeMessageBytes to every
  // PS (on connections of its own, while training goes on) and times until
  // each confirmed them all. Started from ReportProgress; stopped (within
  // half a second) when the client goes.
  struct ProbeResult {
    uint64_t round = 0;
    uint32_t ps = 0;
    uint64_t bytes = 0, micros = 0;
  };
  static constexpr size_t kProbeMessageBytes = size_t{4} << 20;
  static constexpr int kProbeMessages = 4;
  void MaybeProbe();
  static std::vector<ProbeResult> Probe(std::stop_token stop, uint64_t round, int rank,
                                        const std::vector<std::string>& addresses);
  uint64_t probed_round_ = 0;  // the training thread's
  std::mutex probe_mu_;
  std::vector<ProbeResult> probe_results_;  // guarded by probe_mu_
  bool probe_finished_ = false;             // guarded by probe_mu_
  std::jthread probe_thread_;               // joined before the results go
  // Last: its thread reads the fields above, so it must stop before they go.
  std::unique_ptr<HeartbeatSender> heartbeat_;
};

}  // namespace een
