// Coordinator: the job's control plane (started by een-launch).
//
// It registers every PS and worker, checks that all workers train the same
// model, builds the shard map (epoch 1) once everyone is there and sends
// each a JobStart. It tracks heartbeats: a process silent longer than its
// allowance (liveness.h) is declared lost, and so is one een-launch saw
// end. It serves barriers, logs a progress line, and ends the job cleanly
// when every worker is done and every PS has left. Run() returns Ok then,
// Aborted otherwise.
//
// The coordinator is a dispatcher: each message kind has one row in its
// table (who may send it, its handler), and each protocol is a small state
// machine of its own, with its own unit tests, that the handlers drive:
//   MembershipRound (membership_round.h): which workers train, agreed with
//     every PS (a lost worker drops out, a replacement or new one joins);
//   ShardMove (shard_move.h): shards moving to a new PS, or off a drained one;
//   PlanFailover and Rollback (ps_recovery.h): a lost PS's backups take
//     over (replicas 2), or every PS rolls back to a snapshot;
//   SnapshotAgreement (snapshot_agreement.h): the newest snapshot complete
//     on every PS, the resume step, snapshots on demand.
// What it sends is built in coordinator_messages.h. With a state path it
// saves what it must not forget (the job, who is in it, membership,
// snapshots) to RocksDB at every change; restarted with `restore`, it takes
// the running job up again: heartbeats carry a new incarnation, and the
// others greet it on their control connections.
// Sources: coordinator.cc (the loop, dispatch, registration, heartbeats,
// barriers), coordinator_state.cc (its saved state),
// coordinator_membership.cc (workers lost and joining),
// coordinator_ps_loss.cc (failover, rollback, spares), coordinator_moves.cc
// (adding and draining PS), coordinator_claims.cc (who may take a rank),
// coordinator_metrics.cc (eenctl metrics), coordinator_status.cc (eenctl
// status, the /metrics page), coordinator_trace.cc (eenctl debug --trace,
// flight records), coordinator_nodes.cc (the
// launchers of a per-node launch).
// Thread safety: single-threaded; call everything from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/consistency.h"
#include "common/job_config.h"
#include "common/metrics.h"
#include "common/shard_map.h"
#include "common/transport/device.h"
#include "een/optimizer.h"
#include "een/redo_log.h"
#include "launcher/coordinator_messages.h"
#include "launcher/elastic_nodes.h"
#include "launcher/event_store.h"
#include "launcher/job_counters.h"
#include "launcher/liveness.h"
#include "launcher/membership_log.h"
#include "launcher/membership_round.h"
#include "launcher/metrics_server.h"
#include "launcher/process_rates.h"
#include "launcher/process_sighting.h"
#include "launcher/ps_recovery.h"
#include "launcher/shard_move.h"
#include "launcher/slice_balancer.h"
#include "launcher/snapshot_agreement.h"
#include "launcher/state_store.h"
#include "schema/een.capnp.h"

namespace een {

struct CoordinatorOptions {
  std::string listen_address = "tcp://127.0.0.1:0";
  JobConfig job;             // sizes, deadlines and sharding (transport and host unused here)
  bool resume = false;       // start from the newest snapshot intact on every PS
  std::string state_path;    // RocksDB for the coordinator's own state ("": keep none)
  bool restore = false;      // restart: take the job up from state_path
  std::string snapshot_dir;  // with snapshots: where the membership history goes too
  std::string verdict_path;  // "": none; else the reason the job was aborted is written there
  std::string lost_path;     // "": none; else each worker declared lost appends "RANK PID" there
  std::string joined_path;   // "": none; else each worker that joins appends "RANK PID" there
  ElasticNodes elastic;      // per-node launch with --nnodes MIN:MAX (else disabled)
  std::string job_settings;  // per-node launch: node 0's JobWideSettings ("": not checked)
  // Where flight records go (a step stalls, the job fails); empty: a new
  // private folder /tmp/een-flight-XXXXXX, made at the first record.
  std::string flight_dir;
  std::string torch_store;  // per-node launch: node 0's c10d store, HOST:PORT, for the others
  int attempt = 0;          // the job's restarts before this run (TORCHELASTIC_RESTART_COUNT)
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();

  // Listens; with `restore`, first takes the running job up from its state.
  Status Bind();
  const std::string& address() const { return listener_->address(); }
  Status Run(const std::atomic<bool>& stop);
  // The job ended because a worker of a job that takes no replacement of
  // one worker was lost by its silence: every worker should start again.
  bool wants_every_worker_restarted() const { return restart_every_worker_; }

 private:
  using Clock = std::chrono::steady_clock;
  // A process that takes (or takes again) a rank: its address and identity.
  struct Process {
    transport::PeerId control;
    std::string host;
    int pid = 0;
    std::string data_address;   // PS only
    std::string local_address;  // PS only: for processes of its host (empty: none)
  };
  static Process ProcessOf(const transport::PeerId& peer, wire::Register::Reader reg);
  struct Node {
    wire::Role role = wire::Role::WORKER;
    int rank = -1;
    std::string host;
    int pid = 0;
    std::string data_address;
    std::string local_address;
    transport::PeerId control;
    bool registered = false;
    bool done = false;     // worker finished / PS left
    bool lost = false;     // declared lost; the job goes on without it (a PS: until replaced)
    bool joining = false;  // worker: a replacement waiting for the membership change
    // Worker: finished, and waits for the job's final values (DataParallel's
    // Finish()): the job does not end before it took them (or went).
    bool awaits_final = false;
    bool final_taken = false;
    bool told_end = false;   // it heard the job ended (or exited): the coordinator may go
    uint64_t join_step = 0;  // worker: the step it joined the running job at (0: the start)
    bool drained = false;    // PS: its shards moved away; told to leave
    Liveness liveness;       // heartbeats: when its silence means it is lost
    // This silence (reset by a heartbeat): its process's CPU time once it
    // had been silent half the threshold (process_sighting.h), and whether
    // it was found silent past its allowance but running here (slow).
    std::optional<uint64_t> silence_cpu;
    bool slow = false;
    uint64_t step = 0;
    double loss = 0;
    bool loss_given = false;  // the program gave `loss` (NaN shows as nan)
    uint64_t samples = 0;
    uint64_t sync_micros = 0;
    uint64_t staleness = 0;                   // ssp/async (see Heartbeat)
    std::vector<uint64_t> snapshot_steps;     // PS, resuming: its intact snapshots
    std::string snapshot_problem;             // PS, resuming with none intact: why
    bool snapshot_folder_empty = false;       // PS, resuming: it holds no snapshot at all
    std::vector<uint64_t> earlier_snapshots;  // PS, not resuming: an earlier run's steps
    uint64_t snapshot_step = 0;               // PS: newest snapshot written
    uint64_t chunks_ready = 0;                // PS: map epoch whose chunks it all holds
    std::vector<MetricSample> metrics;        // from its newest heartbeat
    uint64_t compute_micros = 0;              // worker: last step's compute
    uint64_t in_program_micros = 0;           // worker: in its own code this long (0: in Step())
    uint64_t replication_lag = 0;             // PS: steps its backups lag (Heartbeat)
    struct Wait {                             // PS: the step waiting longest for gradients
      uint64_t step = 0;
      uint32_t chunk = 0;
      std::vector<int> missing;
      uint64_t waited_ms = 0;  // when heard
      Clock::time_point heard;
    };
    std::optional<Wait> wait;
    ProcessRates rates;  // CPU and bytes per second, from its heartbeats
    struct Probe {       // worker: its latest probe round's measure of one PS link
      uint64_t round = 0;
      int ps = 0;
      double bytes_per_sec = 0;
    };
    std::vector<Probe> probes;

    // Registered and still taking part: not lost, not done.
    bool active() const { return registered && !lost && !done; }
    // `process` holds this rank from now: a first registration, a
    // replacement or a spare. It starts with no metrics and a fresh silence.
    void Take(const Process& process, Clock::time_point now);
  };

  // One row of the dispatch table: who may send a message kind, and what
  // handles it.
  struct ControlMessage {
    enum class From {
      kAnyone,    // a member speaking for itself (checked by CheckIdentity), or anyone
      kOperator,  // eenctl (or een-launch): drain, snapshot, metrics
      kLauncher,  // een-launch only: process exits
    };
    From from;
    Status (*handle)(Coordinator&, const transport::Envelope&, wire::Header::Reader);
  };
  static const ControlMessage* ControlMessageOf(wire::Header::Which kind);

  void Handle(const transport::Envelope& envelope);
  // Control messages name their sender: remember where to reach it.
  void NoteControlRoute(const transport::PeerId& peer, wire::Header::Reader h);
  // A message speaks only for the identity its connection authenticated as
  // (`authenticated`; empty: a job without secret): a worker or PS for its
  // own rank (a spare for any PS rank), eenctl and the launcher only for
  // the requests their row of the table allows.
  static Status CheckIdentity(const std::string& authenticated, ControlMessage::From from,
                              wire::Header::Reader h);
  void SaveState();
  Status RestoreState();
  Status HandleRegister(const transport::PeerId& peer, wire::Register::Reader reg);
  Status HandleHeartbeat(const transport::PeerId& peer, wire::Heartbeat::Reader hb);
  Status HandleMapRequest(const transport::PeerId& peer);
  // A worker whose map is older than the latest rollback's (or any, while
  // one is under way) has steps to redo first: it is sent back (STALE_EPOCH).
  Status HandleBarrier(const transport::PeerId& peer, uint64_t sequence, uint64_t map_epoch);
  // A rollback began: every worker waiting at a barrier is sent back to
  // redo its steps from the snapshot (it comes to the barrier again).
  void SendBackFromBarriers();
  transport::Message SentBackFromBarrier(uint64_t sequence) const;
  // PS `ps`'s step waits for the gradients of a worker that waits at a
  // barrier (the others are still in Step()): neither side can go on. Once
  // that holds for a while, the job ends naming both sides.
  void CheckBarrierAgainstStep(const Node& ps, Clock::time_point now);
  // DataParallel::NextBatch(): the next batch number, once each. Saved with
  // the state every kBatchesPerSave batches: a restarted coordinator deals
  // on from the last saved number (up to that many batches come again).
  Status HandleBatchClaim(const transport::PeerId& peer, uint64_t sequence, uint64_t step,
                          uint64_t not_before);
  // ssp/async: a lost worker's batches of its steps from `from` on are dealt again; how many.
  size_t DealAgain(int worker, uint64_t from);
  // ssp/async, resumed or rolled back to the snapshot of `step`:
  // NextBatch() deals from step x live workers on, as if each worker took
  // one batch a step (a faster worker's batches past `step` come again).
  void TakeUpBatchesAt(uint64_t step);
  Status HandleDone(const transport::PeerId& peer, uint64_t steps, bool awaits_final = false);
  Status HandleFinalTaken(const transport::PeerId& peer);
  // Every worker finished: the step whose values are the job's final ones
  // (nullopt before), for the workers awaiting them (HeartbeatReply.finalStep).
  std::optional<uint64_t> final_step_;
  // A worker done with its data (Finish(), or its process exited 0): with
  // others still training, they go on without it (a membership change).
  // `how`: "finished at step 12", for the log.
  void WorkerFinished(Node& worker, const std::string& how);
  Status HandleWorkerExited(wire::WorkerExit::Reader exit);
  // --ps 0: no process registers; a worker's exit is all the coordinator
  // hears of it (status 0: done; else the job ends naming it).
  bool WithoutPs() const { return options_.job.ps == 0; }
  // The workers are torch.distributed's een backend (its placeholder model).
  bool ServesProcessGroups() const { return IsProcessGroupModel(model_); }
  Status PlainWorkerExited(Node& w, wire::WorkerExit::Reader exit);
  // een-launch saw a PS or worker process end and starts a replacement:
  // lost at once (before the start: its rank is free again). Answered.
  Status HandleProcessGone(const transport::PeerId& peer, wire::ProcessGone::Reader gone);
  // A process registering for a rank that `held` (alive: not lost, not
  // done) holds: it is admitted only once that one is declared lost (on
  // een-launch's word or by its silence). Until then its registration goes
  // unanswered (it asks again every second), and after 3x the failover
  // threshold + 5 s it is refused: a second process for one rank.
  // Returns the refusal, or Ok to wait.
  Status ClaimOfLiveRank(const Node& held, int pid);
  // Per-node launch: a node's een-launch asks how the job stands (the
  // rendezvous, then every heartbeat interval), or ends the job for a
  // reason (its Ctrl-C, its roles' failure). Answered; a launcher whose
  // counts disagree with the job's, or a second one for a node rank, is
  // refused.
  Status HandleNodeStatus(const transport::PeerId& peer, wire::NodeStatus::Reader status);
  // A PS declared lost (`why`: who, and why): its backups take over
  // (replicas 2), or the job rolls back (snapshots), or the job ends.
  void PsLost(Node& lost, const std::string& why);
  void HandleLeave(const transport::PeerId& peer);
  // A PS found a worker's NaN or infinite gradient (not applied): the job ends for it.
  Status HandlePsFault(const transport::PeerId& peer, const std::string& reason);
  // A PS whose Join() failed once the job had started: the job ends with its reason.
  Status HandlePsCannotStart(const transport::PeerId& peer, wire::Error::Reader error);
  Status StartJob();
  // A PS's heartbeat said a newer snapshot: is a step complete now?
  void NoteSnapshots();
  // Declares lost the first PS, then every worker, silent past its
  // allowance (liveness.h). Before it does, it handles every message that
  // waits in the listener: a heartbeat queued behind others is no silence.
  void CheckLiveness();
  // What is known of `n`'s process: this host's /proc, or for a process of
  // another host the report of the een-launch there (when it asked within
  // `fresh`: a host cut off says nothing, and is judged by silence; one
  // asleep there counts as running, up to the cap).
  ProcessSighting Sight(const Node& n, std::chrono::milliseconds fresh) const;
  // Takes each message waiting in the listener, without blocking.
  void DrainInbox();
  // Before the start, once the start-up time is up: refuses the job naming
  // who never registered (or whose models disagree).
  void CheckStartupTimeout();
  // A lost PS, with snapshots: every PS goes back to the newest complete
  // snapshot, a replacement takes the lost one's shards, workers redo.
  void BeginRecovery(Node& lost, const std::string& why);
  // A lost PS, with replicas 2: its backups take over (no rollback).
  // Returns false when some shard has no live backup.
  bool FailOver(Node& lost, const std::string& why);
  // A PS process that registers while the job runs, or a spare: it takes
  // the place of ps `rank` (declared lost first, for `why`, if it is not).
  Status ReplacePs(int rank, const Process& process, const std::string& why);
  // A PS that joins with the next rank gets its share of the shards; a
  // drained PS hands all of its own over and leaves (ShardMove).
  Status AddPs(const Process& process);
  Status HandleDrain(const transport::PeerId& peer, int rank);
  void StartMoves(ShardMap::Moves moves, int leaving, const std::string& what);
  void MaybeFinishMoves();
  // After a PS loss: a standby takes its place at once, if there is one.
  void UseSpare(int rank);
  // The job ended: standbys are told, and exit.
  void ReleaseSpares();
  void SendMapChange();
  // Sends the message `make` builds to each PS of `ranks`; warns for each
  // one that cannot be reached (`what`: what the message is about) and
  // returns the first such failure, after trying them all.
  Status SendToPs(const std::vector<int>& ranks, const std::function<transport::Message()>& make,
                  const std::string& what);
  // The same to every PS not lost (a drained one too: it follows the map
  // until it leaves).
  Status SendToLivePs(const std::function<transport::Message()>& make, const std::string& what);
  std::vector<bool> UsablePs() const;
  // The PS that serve shards now (registered, not lost, not drained or
  // gone), ascending: the ones a membership round waits for.
  std::vector<int> ServingPs() const;
  std::vector<uint64_t> ChunksReady() const;
  // --replicas 2: says once per shard map epoch when every usable PS holds
  // every chunk of it (a PS lost before that, past step 0, ends the job).
  void MaybeSayBackupsBuilt();
  Status HandleRolledBack(const transport::PeerId& peer, wire::Rollback::Reader done);
  // `rebuild`: a PS joining a running job; `join_step`: a worker that does.
  Status SendJobStart(const Node& n, bool rebuild = false, uint64_t join_step = 0);
  void MaybeEndRecovery();
  Result<ShardMap> CurrentMap() const;
  // Each PS rank's host (its node's name), and the map told of them before
  // it places backups (a backup never on its primary's host, if it can).
  std::vector<std::string> PsHosts() const;
  // Each PS's host and same-host route, into map_ (a PS may have been
  // replaced or added on another host).
  void RefreshPsHosts();
  std::vector<LocalRoute> LocalRoutes() const;
  // `what`: who, and why it counts as lost.
  void WorkerLost(Node& worker, const std::string& what);
  // Appends the worker to --joined-file (een-launch: which replacements joined).
  void RecordJoined(const Node& worker);
  // A worker process registering while the job runs, in place of a lost
  // one: it joins at the step the PS agree on (a membership change).
  Status AcceptReplacementWorker(const transport::PeerId& peer, wire::Register::Reader reg);
  Status CheckSameModel(int rank, const std::vector<TensorInfo>& model);
  // Before the start: when workers' models disagree and every worker has
  // offered its model (or the start-up time is up), refuses the job naming
  // the first tensor they disagree on and who has what.
  void MaybeRefuseMismatchedModels();
  // Opens a membership round for the live workers (MembershipRound) with
  // batch `shares` (--dynamic-slicing; by default the last round's when the
  // live workers are the same, else equal); it also serves the snapshot
  // requests waiting so far.
  void StartMembershipChange(std::optional<std::vector<uint32_t>> shares = std::nullopt);
  // --dynamic-slicing auto: a round with new batch shares when the
  // workers' measured speeds call for them (SliceBalancer).
  void MaybeReslice();
  // --dynamic-slicing: worker `rank`'s samples of each global batch by the
  // latest round (0: equal shares, or it does not train).
  uint32_t ShareOf(int rank) const;
  // A round wanted now: begun at once, or right after the pending one.
  void WantMembershipChange();
  // Workers finished while others still train: past a moment (a normal
  // end: the others finish too), the others go on without them.
  void GoOnWithoutFinished();
  // The live PS changed (one lost, replaced, added): a pending round waits
  // for answers that never come, or lacks a PS that never heard of it; it
  // begins again for the PS live now.
  void PsChanged();
  // eenctl metrics: every known process's newest metrics (coordinator_metrics.cc).
  Status HandleMetricsRequest(const transport::PeerId& peer);
  Status HandleSnapshotRequest(const transport::PeerId& peer);
  Status HandleMembershipPrepared(const transport::PeerId& peer,
                                  wire::MembershipPrepared::Reader prepared);
  void ReleaseBarriers();
  void MaybeFinish();
  // Every worker waiting for the final values heard the job ended, or went
  // silent (then it is no longer waited for).
  bool AwaitingWorkersTold();
  // `w` waits for the final values but was silent 10x the failover
  // threshold: it is no longer waited for (true).
  bool GaveUpOnAwaiting(Node& w, Clock::time_point now);
  std::vector<int> LiveWorkerRanks() const;
  // The furthest step any worker has reached (0 before any).
  uint64_t NewestWorkerStep() const;
  void Abort(const std::string& reason);
  // Before the start: tells every registered process why, then aborts.
  void RefuseJob(const std::string& reason);
  void ReportProgress();
  Node* NodeByControl(const transport::PeerId& peer);
  std::string Describe(const Node& n) const;
  std::vector<Node>& NodesOf(wire::Role role) { return role == wire::Role::PS ? ps_ : workers_; }
  // Keeps the membership history next to the snapshots too, for --resume.
  void SaveHistory();
  // A worker said its sampler's batch size (heartbeat dataBatch): kept, saved
  // and told to every worker that starts from now on (JobStart.dataBatch).
  void NoteDataBatch(uint64_t batch);
  // A worker's loop drew its data further ahead than any before (heartbeat
  // dataLookAhead): later changes of the data's layout take effect past it.
  void NoteDataLookAhead(int rank, uint64_t steps);

  CoordinatorOptions options_;
  Consistency consistency_;  // options_.job.consistency, parsed (een-coordinator checks it)
  SliceBalancer slices_;     // --dynamic-slicing auto
  bool warned_unsliced_ = false;
  std::unique_ptr<transport::Listener> listener_;
  std::unique_ptr<MetricsServer> metrics_server_;  // --metrics-port
  Clock::time_point next_metrics_page_;
  // Publishes a fresh /metrics page about once a second.
  void MaybePublishMetrics();
  std::unique_ptr<StateStore> state_store_;
  uint64_t incarnation_;  // random per start: tells the others we restarted
  uint64_t map_epoch_ = 1;
  std::optional<ShardMap> map_;    // owners and backups, once the job started
  bool map_moved_ = false;         // a failover or move changed owners since the start
  uint64_t backups_said_for_ = 0;  // MaybeSayBackupsBuilt: the epoch last said
  int worker_replacements_ = 0;    // replacement workers accepted (--max-restarts)
  std::vector<Process> spares_;    // standby PS (een-launch --spare-ps), oldest first
  MembershipRound membership_;     // which workers train
  ShardMove moves_;                // shards moving to a new PS or off a drained one
  Rollback rollback_;              // every PS back to a snapshot after a PS loss
  SnapshotAgreement snapshots_;    // complete snapshots, resume step, snapshots on demand
  std::vector<Node> ps_, workers_;
  std::vector<TensorInfo> model_;
  struct OfferedModel {  // a worker's model, registered or not (it may disagree)
    transport::PeerId control;
    std::vector<TensorInfo> model;
  };
  std::map<int, OfferedModel> offered_models_;  // by worker rank, before the start
  std::map<int, Clock::time_point> claims_;     // pid -> first claim of a live process's rank
  struct NodeLauncher {                         // per-node launch: one een-launch per node
    std::string host;
    int pid = 0;
    Clock::time_point heard;
    bool told_end = false;                  // answered once the job had ended (finished or aborted)
    bool forgotten = false;                 // silent before the start: its roles' ranks were freed
    coordinator_messages::NodeShare share;  // elastic: its ranks, once given
    // What its host's /proc said of its roles, by pid, in its latest question.
    std::map<int, ProcessSighting> sightings;
  };
  // Elastic: closes the rendezvous when it is time (see elastic_nodes.h).
  void MaybeCloseRendezvous();
  // Elastic: ranks for a node that joins the running job.
  void AssignLateNode(int node, NodeLauncher& launcher);
  // The lost workers of lost nodes that `node` is to replace (handing out
  // new ones while restarts are left).
  std::vector<int> WorkersToRestartOn(int node);
  // Which job-wide flags of a node differ from node 0's ("" when none).
  std::string SettingsThatDiffer(const std::string& settings) const;
  // Whether a NodeStatus's counts are this job's; else why not.
  std::string NodeCountsProblem(wire::NodeStatus::Reader status) const;
  bool LauncherSilent(const NodeLauncher& launcher) const;
  // Before the start: the roles registered from `host` are gone with its
  // een-launch (they die with it); their ranks are free again.
  void ForgetRolesOf(const std::string& host);
  // Before the start: a node's een-launch silent past its allowance took its
  // roles with it (ForgetRolesOf).
  void ForgetSilentNodesBeforeStart();
  // Before the start: `n` is gone; its rank is free for whoever registers.
  void FreeRank(Node& n);
  // Whether every node's een-launch heard how the job ended (or went silent):
  // the coordinator waits for that, within bounds, before it exits.
  bool LaunchersTold() const;
  std::map<int, NodeLauncher> node_launchers_;    // by node rank
  std::map<int, std::string> refused_launchers_;  // by node rank: why (for the verdict)
  bool rdzv_closed_ = false;                      // elastic: the first nodes are known
  Clock::time_point last_node_joined_;            // elastic: for the last call
  // Elastic: ranks from the job's size up to these are a late node's PS and
  // workers, each added in rank order (a PS once the one before it took its
  // shards, a worker once its node's PS joined).
  int next_late_ps_ = 0;
  int next_late_worker_ = 0;
  std::map<int, int> restart_on_;          // a lost node's worker rank -> the node restarting it
  std::map<int, std::string> moved_from_;  // worker rank -> the lost node it was restarted from
  OptimizerConfig optimizer_;
  wire::JobState state_ = wire::JobState::STARTING;
  std::string abort_reason_;
  bool restart_every_worker_ = false;  // see wants_every_worker_restarted()
  Clock::time_point created_ = Clock::now();
  Clock::time_point aborted_at_, shutdown_at_;
  std::optional<Clock::time_point> leaving_at_;  // finished: when it could go (it lingers)
  std::map<uint64_t, std::set<int>> barriers_;   // sequence -> worker ranks waiting
  struct BarrierAgainstStep {                    // see CheckBarrierAgainstStep
    uint64_t step = 0;
    int worker = -1;
    Clock::time_point since;
  };
  std::map<int, BarrierAgainstStep> barrier_against_step_;  // by PS rank
  uint64_t data_batch_ = 0;       // the samplers' batch size, once a worker said it
  uint64_t data_look_ahead_ = 0;  // the most steps ahead any worker's loop drew its data
  uint64_t next_batch_ = 0;       // the batch NextBatch() hands out next
  // ssp/async: the batches dealt to each worker by its own step (the newest 4096), and those of
  // a lost worker's steps not applied everywhere, dealt again before next_batch_.
  std::map<int, RedoLog<uint64_t>> dealt_;
  std::deque<uint64_t> deal_again_;
  static constexpr uint64_t kBatchesPerSave = 256;
  uint64_t batches_since_save_ = 0;  // dealt since the last SaveState()
  uint64_t start_step_ = 0;
  Clock::time_point last_progress_ = Clock::now();
  JobCounters counters_;  // eenctl status, /metrics
  // The flight recorder: every process's newest data-path events
  // (coordinator_trace.cc: eenctl debug --trace full, flight records).
  EventStore events_;
  struct TraceAsk {  // an eenctl debug waiting for its steps to pass
    transport::PeerId peer;
    uint64_t first = 0, last = 0;
    Clock::time_point asked;
    std::optional<Clock::time_point> passed;  // when every live worker was past `last`
  };
  std::vector<TraceAsk> trace_asks_;
  // eenctl status --probe: a round every worker answers by measuring its
  // link to every PS (coordinator_status.cc).
  uint64_t probe_round_ = 0;                      // the newest round (0: none yet)
  std::optional<Clock::time_point> probe_since_;  // while a round is open
  std::vector<transport::PeerId> probe_asks_;     // eenctl waiting for the round
  Status HandleProbeRequest(const transport::PeerId& peer);
  // Answers the round's askers once every live worker measured every PS, or
  // after kProbeWait; the round then closes.
  void MaybeAnswerProbes();
  // The workers' probes of a heartbeat, checked (nothing kept from a lie).
  void NoteProbes(Node& worker, capnp::List<wire::ProbeResult>::Reader probes);
  static constexpr std::chrono::seconds kProbeWait{20};
  uint64_t flight_step_ = UINT64_MAX;  // the stalled step whose flight record was written
  std::optional<Clock::time_point> last_stall_record_;  // at most one a minute
  Status HandleTraceRequest(const transport::PeerId& peer, wire::TraceRequest::Reader request);
  // Answers the trace requests whose steps every live worker has passed
  // (a few heartbeats later: their last events are in).
  void MaybeAnswerTraces();
  // Every process's events of steps [first, last], with the chunks' names.
  void BuildTraceReport(uint64_t first, uint64_t last, const std::string& reason,
                        wire::TraceReport::Builder report) const;
  // Writes the last kFlightSteps steps up to `step` of every process to a
  // file (a Chrome trace), logs it and returns its path ("" if none).
  // `failed`: the job failed (else a step stalled).
  std::string WriteFlightRecord(uint64_t step, const std::string& reason, bool failed);
  static constexpr uint64_t kFlightSteps = 10;
  static constexpr uint64_t kMaxTraceSteps = 100;
  // eenctl status: how the job stands now (coordinator_status.cc).
  Status HandleStatusRequest(const transport::PeerId& peer);
  void BuildStatus(wire::JobStatus::Builder status) const;
  // A PS's StepWait, checked against the map (nullopt when it lies).
  std::optional<Node::Wait> WaitOf(wire::StepWait::Reader wait, Clock::time_point now) const;
  Clock::time_point last_turn_ = Clock::now();  // of Run()'s loop: its own stalls are forgiven
  uint64_t last_progress_samples_ = 0;
  uint64_t last_progress_calls_ = 0;
  std::optional<Clock::time_point> finished_change_at_;  // see GoOnWithoutFinished()  // the een
                                                         // backend: the lead worker's calls then
};

}  // namespace een
