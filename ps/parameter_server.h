// ParameterServer: one PS process's event loop.
//
// Join(): listens for workers on the data address, registers with the
// coordinator, and waits for the job to start (shard map + optimizer).
// Serve(): answers Push and Pull messages until the coordinator ends the job
// (Ok), the job is aborted or the coordinator is lost (Aborted), or `stop`
// turns true (Ok). Every message is validated whole before any of it is
// applied; a bad one gets an Error answer and changes nothing, a duplicate
// gradient is dropped with a log line. Pushes and pulls may carry bf16 or
// fp16 (the worker's EEN_WIRE_DTYPE): the PS widens gradients, keeps fp32
// master values and answers in the dtype asked. Pulls wait until every chunk asked
// for has reached the version asked for. With EEN_SNAPSHOT_EVERY=N, every
// N steps a copy of all its chunks goes to a background RocksDB writer;
// with EEN_RESUME it starts from the snapshot step the coordinator picks.
// When the coordinator declares a worker lost, the PS stops waiting for it
// and takes part in agreeing the step from which every worker re-shards.
// When a PS is lost (with snapshots), the coordinator sends a Rollback: the
// PS reloads its snapshot of that step and takes the new map epoch, so
// messages routed with the old map are refused as stale.
// With replicas 2 (ps/replication.cc) each chunk's primary sends every
// step's mean gradient to the chunk's backup PS and answers a pull for a
// version only once the backup confirmed it; when the coordinator moves
// shards (mapChange: a PS lost, or one joined), backups become primaries
// and new backups get a whole image. Data messages for a newer map epoch
// than this PS knows wait until its mapChange arrives.
// With gradient clipping each step's chunks are held back once aggregated:
// workers ask for this PS's share of the squared norm (NormQuery, answered
// once every chunk here has aggregated the step) and send the total back
// (ClipNorm), which applies them (see ChunkStore).
// A spare (EEN_SPARE=1) registers as a standby and waits, with no deadline,
// until the coordinator gives it a lost PS's rank (then it joins like a
// replacement) or says the job ended (then Join returns Ok, not_needed()).
// Thread safety: Serve() runs on one thread; the heartbeat has its own.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "common/flight_recorder.h"
#include "common/heartbeat_sender.h"
#include "common/job_env.h"
#include "common/metrics.h"
#include "common/shard_map.h"
#include "common/transport/device.h"
#include "ps/chunk_store.h"
#include "ps/collective_table.h"
#include "ps/ps_messages.h"
#include "ps/snapshot_writer.h"

namespace een::ps {

class ParameterServer {
 public:
  explicit ParameterServer(JobEnvironment env) : env_(std::move(env)) {}

  Status Join(const std::atomic<bool>& stop);
  Status Serve(const std::atomic<bool>& stop);
  // Join() failed after the job had started (a snapshot this PS cannot take
  // up, say): tells the coordinator why, so the job's verdict names the
  // cause rather than this PS's silence.
  void ReportJoinFailure(const Status& why);

  // A spare that was never needed: Join() returned Ok without a job to serve.
  bool not_needed() const { return not_needed_; }

  // For tests: the store once joined.
  const ChunkStore* store() const { return store_.get(); }

 private:
  struct PendingPull {
    transport::PeerId peer;
    uint64_t request_id;
    uint64_t min_version;
    bool gradients;
    WireType type;  // of the answer's payload
    std::vector<uint32_t> chunks;
    bool frozen_values = false;    // frozen chunks: values, not just an empty frame
    bool optimizer_state = false;  // a checkpoint: values and optimizer state (AnswerState)
    bool final_values = false;     // ssp/async: no staleness bound (wire::Pull.finalValues)
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    int worker = -1;  // who asked (for the flight recorder)
  };

  struct PendingNorm {
    transport::PeerId peer;
    uint64_t request_id;
    uint64_t step;
  };

  void Handle(const transport::Envelope& envelope);
  // The data plane's dispatch table: each message kind a PS takes from
  // workers and peers, with the map epoch it was routed with, the identity
  // it speaks for and its handler; nullptr for any other kind.
  struct DataMessage {
    uint64_t (*epoch)(wire::Header::Reader h);
    std::string (*speaks_for)(wire::Header::Reader h);
    Status (*handle)(ParameterServer& ps, const transport::Envelope& e, wire::Header::Reader h);
  };
  static const DataMessage* DataMessageOf(wire::Header::Which kind);
  // Messages from the coordinator on the control connection (membership,
  // rollback, map changes), dispatched through their own table: one
  // handler per kind (nullptr: a kind with nothing to do, such as a
  // repeated JobStart).
  using ControlHandler = Status (*)(ParameterServer& ps, wire::Header::Reader h);
  static ControlHandler ControlMessageOf(wire::Header::Which kind);
  Status HandleControl(const transport::Message& message);
  Status HandleMembershipPrepare(wire::MembershipPrepare::Reader prepare);
  Status HandleRollback(uint64_t epoch, uint64_t step);
  Status HandleMembershipCommit(wire::Membership::Reader commit);
  void StepsCompleted(const std::vector<uint32_t>& completed);
  // Replication (ps/replication.cc).
  void ReplicateSteps(const std::vector<uint32_t>& completed);
  void SendImages(const std::vector<uint32_t>& chunks);
  Status HandleReplicate(wire::Replicate::Reader r, const transport::Message& message);
  Status HandleReplicated(wire::Replicate::Reader r);
  Status AdoptMap(ShardMap next);
  // Every primary chunk with a backup counts as confirmed at its version
  // (after a restore: the backup restored the same snapshot).
  void TrustBackups();
  transport::Connection* Peer(uint32_t ps);
  void ReplayFutureMessages();
  Status HandlePush(const transport::PeerId& peer, wire::Push::Reader push,
                    const transport::Message& message);
  Status HandlePull(const transport::PeerId& peer, wire::Pull::Reader pull);
  // Gradient clipping: a worker asks for this PS's share of a step's norm, or
  // brings the total.
  // The een backend's collectives (collective_table.h): answered once
  // every contributor of the part came.
  Status HandleReduce(const transport::PeerId& peer, wire::Reduce::Reader reduce,
                      const transport::Message& message);
  void AnswerCollective(const CollectiveResult& done);
  Status HandleNormQuery(const transport::PeerId& peer, wire::NormQuery::Reader query);
  Status HandleClipNorm(wire::ClipNorm::Reader clip);
  // Both: clipping is on, the map epoch is current, the worker trains.
  Status CheckClipMessage(const char* what, uint64_t epoch, int worker) const;
  // Answers the norm queries whose step every chunk here has aggregated.
  void AnswerReadyNorms();
  // After chunks completed a step: `applied` moved on (snapshots, backups,
  // pulls); with clipping, norm queries may be answerable now.
  void AfterCompletion(const std::vector<uint32_t>& applied);
  Status CheckChunks(capnp::List<uint32_t>::Reader chunks);
  bool Ready(const PendingPull& pull) const;
  // ssp/async: the worker's own steps applied (and confirmed by the backup)
  // and, under ssp:K, every live worker's step min_version-K.
  bool ReadyPerArrival(const PendingPull& pull) const;
  void Answer(const PendingPull& pull);
  // Worker 0's checkpoint (PushKind STATE): before any step, each chunk
  // takes its values, optimizer state and version; its backup gets an image.
  Status TakeState(wire::Push::Reader push, const transport::Message& message);
  static constexpr uint64_t kMaxCheckpointStep = uint64_t{1} << 48;
  // A checkpoint pull's answer: copies of each chunk's values and optimizer
  // state (ChunkStore::CaptureChunk), with each chunk's version.
  void AnswerState(const PendingPull& pull);
  // Queues a pull that is not ready yet (within the queue's caps).
  Status QueuePull(PendingPull pull);
  // Every waiting pull and norm query forgotten (the map moved on).
  void DropPendingRequests();
  // Pulls older than the step timeout get an error naming the missing workers.
  void ExpirePulls();
  void AnswerReadyPulls();
  void SendError(const transport::PeerId& peer, wire::ErrorCode code, const std::string& text,
                 uint64_t request_id);
  // Opens DIR/ps-RANK; when resuming, lists its intact snapshots (or why
  // it has none); else the steps an earlier run left there.
  Status OpenSnapshots(ps_messages::SnapshotsFound* found);
  // This PS's snapshot store: SNAPSHOT_DIR/ps-RANK.
  std::string SnapshotPath() const {
    return env_.snapshot_dir + "/ps-" + std::to_string(env_.rank);
  }
  // Hands a copy of every chunk to the writer when a snapshot step is reached.
  void MaybeSnapshot();

  JobEnvironment env_;
  std::unique_ptr<transport::Listener> listener_;
  transport::Device* data_device_ = nullptr;
  std::vector<std::unique_ptr<transport::Connection>> peers_;  // to other PS, by index
  std::vector<std::string> peer_addresses_;
  std::deque<transport::Envelope> future_;  // data messages of a newer map epoch
  size_t future_bytes_ = 0;                 // their frames' bytes (capped)
  std::unique_ptr<transport::Connection> control_;
  ShardMap map_;
  std::unique_ptr<ApplyPool> apply_pool_;  // before store_: the store uses it
  std::unique_ptr<ChunkStore> store_;
  std::deque<PendingPull> pending_;
  size_t pending_pull_chunks_ = 0;  // over pending_
  std::deque<PendingNorm> pending_norms_;
  CollectiveTable collectives_{CollectiveBytesCap()};
  std::atomic<uint64_t> step_{0};
  std::unique_ptr<SnapshotStore> snapshots_;  // until the writer takes it
  std::unique_ptr<SnapshotWriter> writer_;
  uint64_t next_snapshot_ = 0;
  uint64_t on_demand_snapshot_ = 0;  // a step the coordinator asked for (0: none)
  bool not_needed_ = false;
  bool job_started_ = false;  // Join() had the job start
  // Worker membership: stamped on pull answers; while a change is being
  // agreed (`frozen_`), no answer goes beyond `freeze_above_`.
  uint64_t membership_epoch_ = 0;
  uint64_t membership_step_ = 0;
  uint64_t membership_data_step_ = 0;  // of the newest membership (0: membership_step_)
  std::vector<int> live_workers_;
  std::vector<uint32_t> batch_shares_;  // of the newest membership (--dynamic-slicing)
  std::vector<UnfinishedSteps> membership_unfinished_;  // of the newest membership
  bool frozen_ = false;
  uint64_t incarnation_ = 0;  // the coordinator's, as last heard
  uint64_t epoch_ = 0;        // shard map epoch data messages must carry
  // What this PS did when (pushes received, chunks applied, backups
  // confirmed, pulls answered), carried by its heartbeat.
  FlightRecorder recorder_;
  // What this PS measures, carried by its heartbeat (eenctl metrics).
  Metrics metrics_;
  Counter& pushes_ = metrics_.counter("ps.pushes");
  Counter& push_bytes_ = metrics_.counter("ps.push_bytes");
  Counter& pulls_answered_ = metrics_.counter("ps.pulls_answered");
  Counter& pull_bytes_ = metrics_.counter("ps.pull_bytes");
  Counter& refused_ = metrics_.counter("ps.messages_refused");
  std::atomic<uint64_t> chunks_ready_{0};  // epoch whose every chunk is initialized here
  void NoteChunksReady();
  // Names the workers a step has waited for longer than the failover
  // threshold (once per step), so a slow worker never stalls unexplained.
  void ReportStall();
  std::chrono::steady_clock::time_point next_wait_check_;  // ExpirePulls, ReportStall
  bool fault_said_ = false;  // the store's nonfinite() went to the coordinator
  // What the heartbeat tells eenctl status, as of the last wait check: the
  // step waiting longest for gradients, and how far backups lag. Written
  // by Serve()'s thread (NoteWaits), read by the heartbeat's.
  struct WaitReport {
    std::optional<ChunkStore::Stall> stall;
    uint64_t replication_lag = 0;
  };
  void NoteWaits();
  static constexpr std::chrono::milliseconds kReportedWait{100};
  void FillWaits(wire::Heartbeat::Builder hb) const;
  mutable std::mutex wait_report_mu_;
  WaitReport wait_report_;  // guarded by wait_report_mu_
  uint64_t stall_reported_step_ = UINT64_MAX;
  // EEN_RESOURCES_AT_STEP=K: log this process's resource use once every
  // chunk reached step K (0: done or not asked).
  uint64_t resources_at_step_ = 0;
  uint64_t freeze_above_ = 0;
  // Last: its thread reads step_ and writer_, so it must stop first.
  std::unique_ptr<HeartbeatSender> heartbeat_;
};

}  // namespace een::ps
