# EEN wire schema. Every message on every socket is one `Header` frame,
# followed by zero or more raw payload frames that never pass through a
# Cap'n Proto builder (zero-copy). A header that declares payloads says how
# many and how large; receivers check both against the frames before use.
@0xd7150cdc5b9c5c61;

$import "/capnp/c++.capnp".namespace("een::wire");

enum Role {
  coordinator @0;
  ps @1;
  worker @2;
}

enum DType {
  f32 @0;
  f16 @1;
  bf16 @2;
}

enum OptimizerKind {
  sgd @0;
  adam @1;
  adamw @2;
  adagrad @3;
  sum @4;      # no server optimizer: pulls return the mean gradient
}

struct OptimizerConfig {
  kind @0 :OptimizerKind;
  lr @1 :Float64;
  momentum @2 :Float64;
  dampening @3 :Float64;
  nesterov @4 :Bool;
  weightDecay @5 :Float64;
  beta1 @6 :Float64 = 0.9;
  beta2 @7 :Float64 = 0.999;
  eps @8 :Float64 = 1e-8;
  lrDecay @9 :Float64;
  initialAccumulator @10 :Float64;
  clipGradNorm @11 :Float64;       # > 0: the mean gradient's global L2 norm is clipped to
                                   # this before each step (torch's clip_grad_norm_)
}

# What a registered tensor is, and so how the PS treat it. Parameters take
# gradients and the optimizer; buffers (BatchNorm statistics and the like)
# are pushed as values every step and the PS keep rank 0's (the lowest live
# rank's) or their mean; frozen parameters (requires_grad false) keep rank
# 0's initial values and are never pushed after.
enum TensorKind {
  parameter @0;
  bufferBroadcast @1;
  bufferAverage @2;
  frozen @3;
}

struct TensorSpec {
  name @0 :Text;
  numel @1 :UInt64;
  kind @2 :TensorKind;
  shape @3 :List(Int64);           # as the worker's module has it (for error messages)
}

# A contiguous piece of one tensor; the unit of sharding and transfer.
struct ChunkSpec {
  tensor @0 :UInt32;
  offset @1 :UInt64;
  numel @2 :UInt32;
  shard @3 :UInt32;
}

struct ShardMap {
  epoch @0 :UInt64;
  tensors @1 :List(TensorSpec);
  chunks @2 :List(ChunkSpec);
  shardOwner @3 :List(UInt32);     # virtual shard -> PS index
  psAddresses @4 :List(Text);      # PS index -> data address
  shardBackup @5 :List(UInt32);    # virtual shard -> backup PS index (replicas 2;
                                   # empty: none; 0xffffffff: none for this shard)
  psLocalRoutes @6 :List(LocalRoute);  # PS index -> its same-host address (empty: none)
}

# How processes on `host` reach a PS without leaving that host (shared
# memory); everyone else uses the PS's data address.
struct LocalRoute {
  host @0 :Text;
  address @1 :Text;                # empty: the PS offers no same-host route
}

# Written by the coordinator beside the snapshots (model-layout): the model
# the PS's chunks belong to and the optimizer whose state they hold, so that
# `eenctl export` can make a checkpoint of them.
struct ModelLayout {
  map @0 :ShardMap;
  optimizer @1 :OptimizerConfig;
}

struct Register {
  role @0 :Role;
  rank @1 :Int32;                  # requested rank (from EEN_RANK)
  host @2 :Text;
  pid @3 :Int32;
  dataAddress @4 :Text;            # PS: where workers reach it
  tensors @5 :List(TensorSpec);    # worker: the model it trains
  optimizer @6 :OptimizerConfig;   # worker: server-side optimizer
  snapshotSteps @7 :List(UInt64);  # PS resuming: steps of its intact snapshots
  spare @8 :Bool;                  # PS: a standby; it gets a rank when a PS is lost
  localAddress @9 :Text;           # PS: where processes of its own host reach it (may be empty)
  snapshotProblem @10 :Text;       # PS resuming with no intact snapshot: why (or "")
  earlierSnapshots @11 :List(UInt64);  # PS not resuming: steps an earlier run left in its folder
  snapshotFolderEmpty @12 :Bool;   # PS resuming: its folder holds no snapshot at all
}

struct JobStart {
  rank @0 :Int32;
  worldSize @1 :Int32;             # number of workers
  numPs @2 :Int32;
  map @3 :ShardMap;
  optimizer @4 :OptimizerConfig;
  resume @5 :Bool;                 # start from the snapshot of `startStep`
  startStep @6 :UInt64;
  rollbackEpoch @7 :UInt64;        # map epoch of the latest rollback (0: none yet)
  rebuild @8 :Bool;                # PS joining a running job: its chunks arrive as
                                   # images from their primaries (no snapshot to load)
  history @9 :List(Membership);    # every membership change so far, oldest first
                                   # (a worker joining at `startStep` finds its data)
  consistency @10 :Text;           # "bsp" (empty: bsp), "ssp:K" or "async"
  dynamicSlicing @11 :Bool;        # --dynamic-slicing: memberships carry batch shares
  joining @12 :Bool;               # worker joining a running job at startStep (a
                                   # replacement or a late one)
  dataBatch @13 :UInt64;           # the batch size the job's samplers draw per worker
                                   # and step (0: not known yet)
}

enum JobState {
  starting @0;
  running @1;
  shutdown @2;                     # finished cleanly: exit 0
  aborted @3;                      # see `reason`: exit non-zero
}

struct Heartbeat {
  step @0 :UInt64;
  loss @1 :Float64;
  samples @2 :UInt64;              # samples processed so far
  syncMicros @3 :UInt64;           # last step's sync time
  role @4 :Role;
  rank @5 :Int32;
  snapshotStep @6 :UInt64;         # PS: newest snapshot durably written (0: none)
  pid @7 :Int32;                   # tells a replaced process from its replacement
  chunksReady @8 :UInt64;          # PS: the map epoch whose every chunk it holds
                                   # initialized (its backups are built); 0: not yet
  lossGiven @9 :Bool;              # worker: `loss` is the program's (it may be NaN)
  metrics @10 :List(Metric);       # the sender's counters and gauges (common/metrics.h)
  computeMicros @11 :UInt64;       # worker: last step's time outside Step() (its compute)
  hasWait @12 :Bool;               # PS: `wait` is set
  wait @13 :StepWait;              # PS: the step that has waited longest for gradients
  replicationLag @14 :UInt64;      # PS: steps its applied chunks are ahead of what
                                   # their backups confirmed (worst chunk; 0: none)
  traffic @15 :List(PeerTraffic);  # worker: bytes to and from each PS so far
  clockOffsetMicros @16 :Int64;    # the coordinator's steady clock minus the sender's
                                   # (from heartbeat round trips; 0 before any)
  events @17 :List(TraceEvent);    # the flight recorder's, since the last heartbeat
  eventsDropped @18 :UInt64;       # events the recorder had no room for, so far
  sentMicros @19 :Int64;           # the sender's steady clock when sent (echoed back)
  probes @20 :List(ProbeResult);   # worker: its latest probe round's (eenctl status --probe)
  staleness @21 :UInt64;           # worker, ssp/async: steps the slowest live worker was
                                   # behind it at its last pull
  batchShare @22 :UInt32;          # worker, --dynamic-slicing: the samples of its last
                                   # step's slice (computeMicros is their time)
  globalBatch @23 :UInt32;         # and the global batch it was a slice of
  inProgramMicros @24 :UInt64;     # worker: how long it has been in its own code since
                                   # Step() last returned (0: inside Step(), or before
                                   # its first); a step waiting for it waits for the
                                   # program (an evaluation), not for EEN
  dataBatch @25 :UInt64;           # worker: the batch size its sampler draws per step
                                   # (JobSampler; 0: not known), kept by the job
  dataLookAhead @26 :UInt32;       # worker: the most steps past the one it trains that
                                   # its loop had drawn (a DataLoader with num_workers
                                   # > 0; 0: none): changes of the data's layout take
                                   # effect past the job's largest
}

# A worker's measure of its link to one PS: `bytes` sent to it, all
# confirmed after `micros`.
struct ProbeResult {
  round @0 :UInt64;
  ps @1 :Int32;
  bytes @2 :UInt64;
  micros @3 :UInt64;
}

# worker -> PS: one payload frame of probe bytes; PS -> worker: probeReply,
# without payload, once it has them all.
struct Probe {
  round @0 :UInt64;
  worker @1 :Int32;
}

# One timed event of a process's data path (common/flight_recorder.h).
struct TraceEvent {
  kind @0 :UInt8;                  # EventKind
  beginMicros @1 :Int64;           # the sender's steady clock (the coordinator's, in a
  endMicros @2 :Int64;             # TraceReport)
  step @3 :UInt64;
  a @4 :UInt32;
  b @5 :UInt32;
  c @6 :UInt32;
}

# eenctl -> coordinator: every process's events of steps [firstStep, lastStep],
# answered once every live worker is past lastStep.
struct TraceRequest {
  firstStep @0 :UInt64;
  lastStep @1 :UInt64;
}

# coordinator -> eenctl: the events, in the coordinator's clock.
struct TraceReport {
  firstStep @0 :UInt64;
  lastStep @1 :UInt64;
  processes @2 :List(ProcessTrace);
  chunks @3 :List(ChunkName);      # by chunk id: what each chunk holds
  note @4 :Text;                   # what is missing, if anything ("" when whole)
  reason @5 :Text;                 # flight records: why it was written
}

struct ProcessTrace {
  role @0 :Role;
  rank @1 :Int32;
  pid @2 :Int32;
  host @3 :Text;
  events @4 :List(TraceEvent);
  dropped @5 :UInt64;
}

struct ChunkName {
  tensor @0 :Text;
  begin @1 :UInt64;
  end @2 :UInt64;
  ps @3 :Int32;                    # its primary
}

# A step some workers' gradients have reached and others' not yet.
struct StepWait {
  step @0 :UInt64;
  chunk @1 :UInt32;                # in the PS's shard map
  missing @2 :List(Int32);         # the workers whose gradients it waits for
  waitedMs @3 :UInt64;             # since the first gradient arrived
}

struct PeerTraffic {
  ps @0 :Int32;
  bytesOut @1 :UInt64;             # pushed to it
  bytesIn @2 :UInt64;              # pulled from it
}

# coordinator -> eenctl (and the /metrics page): the job as it is now.
struct JobStatus {
  state @0 :JobState;
  step @1 :UInt64;                 # the first live worker's
  samplesPerSecond @2 :Float64;
  syncMs @3 :Float64;              # the first live worker's last step
  consistency @4 :Text;            # "bsp"
  mapEpoch @5 :UInt64;
  uptimeMs @6 :UInt64;
  numPs @7 :Int32;
  numWorkers @8 :Int32;
  processes @9 :List(ProcessStatus);
  shards @10 :List(PsShards);
  links @11 :List(HostLink);
  waits @12 :List(StepWaitReport); # longest first
  failovers @13 :UInt64;           # PS losses handled (failover or rollback)
  membershipChanges @14 :UInt64;   # worker membership rounds committed
  syncBoundsMs @15 :List(Float64); # the sync-time histogram: upper bounds,
  syncCounts @16 :List(UInt64);    # and cumulative counts (the last: +Inf)
  syncSumMs @17 :Float64;
  workersLost @18 :UInt64;
  refusedMessages @19 :UInt64;     # control messages the coordinator refused
  liveWorkers @20 :Int32;          # workers training now (numWorkers: every rank so far)
}

struct ProcessStatus {
  role @0 :Role;
  rank @1 :Int32;
  pid @2 :Int32;
  host @3 :Text;
  state @4 :Text;                  # starting, joining, running, finished, lost, drained
  step @5 :UInt64;
  heardMsAgo @6 :UInt64;
  cpuPercent @7 :Float64;          # of one core, over the last few seconds
  rssBytes @8 :UInt64;
  bytesInPerSec @9 :Float64;
  bytesOutPerSec @10 :Float64;
  computeMs @11 :Float64;          # worker: last step's compute
  stragglerScore @12 :Float64;     # worker: computeMs / the workers' median (0: unknown)
  metrics @13 :List(Metric);       # from its newest heartbeat
  syncMs @14 :Float64;             # worker: last step's sync
  staleness @15 :UInt64;           # worker, ssp/async: see Heartbeat
  batchShare @16 :UInt32;          # worker, --dynamic-slicing: its samples of each global
                                   # batch now (0: equal shares)
}

struct PsShards {
  rank @0 :Int32;
  primaryChunks @1 :UInt32;
  primaryBytes @2 :UInt64;
  backupChunks @3 :UInt32;
  backupBytes @4 :UInt64;
  replicationLag @5 :UInt64;       # steps (see Heartbeat)
}

# Data-plane traffic between two hosts, measured from the workers' byte
# counts over the last few seconds.
struct HostLink {
  from @0 :Text;
  to @1 :Text;
  bytesPerSec @2 :Float64;
  probedBytesPerSec @3 :Float64;   # eenctl status --probe: the median worker's measure
                                   # (0: not probed)
}

struct StepWaitReport {
  step @0 :UInt64;
  ps @1 :Int32;
  missing @2 :List(Int32);
  tensor @3 :Text;
  begin @4 :UInt64;                # elements [begin, end) of the tensor
  end @5 :UInt64;
  waitedMs @6 :UInt64;
}

# One counter or gauge of a process: name [a-z0-9_.], at most 64 bytes.
struct Metric {
  name @0 :Text;
  value @1 :Float64;
  counter @2 :Bool;                # a count that only grows; else a gauge
}

# coordinator -> eenctl: the newest metrics of every process it knows.
struct MetricsReport {
  processes @0 :List(ProcessMetrics);
}

struct ProcessMetrics {
  role @0 :Role;
  rank @1 :Int32;
  pid @2 :Int32;
  host @3 :Text;
  heardMsAgo @4 :UInt64;           # since its last heartbeat
  lost @5 :Bool;
  done @6 :Bool;
  metrics @7 :List(Metric);
}

struct HeartbeatReply {
  state @0 :JobState;
  reason @1 :Text;
  incarnation @2 :UInt64;          # changes when the coordinator restarts
  mapEpoch @3 :UInt64;             # a newer one than the worker's: a PS was replaced
  coordinatorMicros @4 :Int64;     # the coordinator's steady clock when it answered
  echoMicros @5 :Int64;            # the heartbeat's sentMicros
  probeRound @6 :UInt64;           # nonzero: workers measure their links to every PS
                                   # for this round (once each)
  finalReady @7 :Bool;             # every worker finished: a worker awaiting the final
  finalStep @8 :UInt64;            # values pulls this step's (bsp; its own steps under
                                   # ssp/async), then says finalTaken
}

struct Barrier {
  sequence @0 :UInt64;
  mapEpoch @1 :UInt64;             # the worker's: one older than the latest rollback's is
                                   # sent back (STALE_EPOCH) to redo its steps first
}

# DataParallel::NextBatch(): the coordinator hands out 0, 1, 2, ... once each.
struct BatchClaim {
  sequence @0 :UInt64;             # the worker's request number (echoed)
  index @1 :UInt64;                # reply: the batch
  step @2 :UInt64;                 # request: the worker's own step the batch is for (a lost
                                   # worker's batches of steps not applied are dealt again)
  notBefore @3 :UInt64;            # request: a batch never dealt is at least this one (the
                                   # first of the epoch the sampler is in: the epochs before
                                   # it were trained in fixed shares)
}

enum PushKind {
  gradient @0;
  initial @1;                      # rank 0's starting values
  state @2;                        # rank 0's checkpoint before the first step: each frame a
                                   # chunk's values, then (a parameter chunk) each optimizer
                                   # state slot; `step` the optimizer steps it holds, which
                                   # the job goes on from
}

# Followed by one payload frame per chunk id, numel * sizeof(dtype) bytes.
struct Push {
  epoch @0 :UInt64;
  step @1 :UInt64;
  worker @2 :Int32;
  kind @3 :PushKind;
  dtype @4 :DType;
  chunks @5 :List(UInt32);
  pullBack @6 :UInt64;             # gradients: answer this request id (a PullReply in `dtype`)
                                   # with these chunks once step+1 is there (0: no answer)
  lr @7 :Float64 = -1;             # gradients: this step's learning rate (< 0: the configured
                                   # one; 0 is a rate); every worker must ask the same
  again @8 :Bool;                  # initial values or state sent again (worker 0, after a PS
                                   # was lost before its backups held them): chunks that
                                   # have them already are skipped
}

struct Pull {
  epoch @0 :UInt64;
  minVersion @1 :UInt64;           # answer once every chunk has reached it
  worker @2 :Int32;
  chunks @3 :List(UInt32);
  requestId @4 :UInt64;
  gradients @5 :Bool;              # sum mode: the mean gradient of step minVersion-1
  dtype @6 :DType;                 # the answer's payload dtype (the PS keeps fp32)
  frozenValues @7 :Bool;           # frozen chunks: their values (joining, after a rollback);
                                   # false: an empty frame once the version is there
  parked @8 :Bool;                 # ssp: no chunks, no answer: this worker takes no step
                                   # until its next gradient (it waits at a barrier), so
                                   # the staleness bound leaves it out until then
  optimizerState @9 :Bool;         # a checkpoint (fp32, every chunk, frozen ones too):
                                   # each chunk's frame holds its values and then, for a
                                   # parameter chunk, each optimizer state slot; the
                                   # answer's `versions` give each chunk's steps applied
  finalValues @10 :Bool;           # ssp/async: the job's final values (every worker
                                   # finished): the staleness bound does not apply (a
                                   # worker that finished behind holds nobody back)
  again @11 :Bool;                 # asked again (no answer for a while): a PS that still
                                   # holds this sender's request of that id keeps waiting
                                   # with it; one that does not answers it as new
}

# Followed by one payload frame per chunk id.
struct PullReply {
  requestId @0 :UInt64;
  version @1 :UInt64;
  dtype @2 :DType;
  chunks @3 :List(UInt32);
  membership @4 :Membership;       # the workers that train from `version` on
  slowest @5 :UInt64;              # ssp/async: the fewest steps any live worker has
                                   # applied to these chunks (the answer's staleness)
  ownSteps @6 :UInt64;             # ssp/async: the fewest of the asking worker's own
                                   # steps these chunks hold (where it takes up after
                                   # a resume: its later ones are dropped as repeats)
  versions @7 :List(UInt64);       # optimizerState: each chunk's version (steps applied)
  stateSlots @8 :UInt32;           # optimizerState: the slots a parameter chunk carries
}

# Gradient clipping (clipGradNorm > 0). Each PS holds a step's mean
# gradient back once it is aggregated; a worker asks every PS for its share
# of the squared norm (NormQuery: one sum per parameter chunk), sums them in
# chunk order (every worker gets the same total, however the chunks are
# placed) and sends the total to every PS (ClipNorm), which
# then scales its chunks' means and applies the optimizer. A PS that applied
# some chunk of that step already (its backup took over) answers with the
# total it was clipped with instead, and the worker sends that one.
struct NormQuery {
  epoch @0 :UInt64;
  worker @1 :Int32;
  step @2 :UInt64;
  requestId @3 :UInt64;
}

struct NormReply {
  requestId @0 :UInt64;
  step @1 :UInt64;
  applied @2 :Bool;                # the step was applied already, clipped with totalNorm
  totalNorm @3 :Float64;
  chunks @4 :List(UInt32);         # otherwise: this PS's parameter chunks
  sumSquares @5 :List(Float64);    # and each one's sum of squares of its mean gradient
}

struct ClipNorm {
  epoch @0 :UInt64;
  worker @1 :Int32;
  step @2 :UInt64;
  totalNorm @3 :Float64;
}

# Which workers take part, from step `effectiveStep` on. `epoch` 0 is the
# job's start (every worker).
struct Membership {
  epoch @0 :UInt64;
  effectiveStep @1 :UInt64;
  liveWorkers @2 :List(Int32);
  snapshotStep @3 :UInt64;         # in a commit: every PS snapshots this step (on demand)
  batchShares @4 :List(UInt32);    # --dynamic-slicing: each live worker's samples of the
                                   # global batch (their sum), in liveWorkers' order;
                                   # empty: every worker its own batch (equal shares)
  unfinished @5 :List(UnfinishedSteps);  # the workers lost at this change whose
                                   # batches from `fromStep` on were not trained
  dataStep @6 :UInt64;             # the first step whose data follow the change (0: the
                                   # effective step): workers' loaders had drawn the
                                   # steps before it (een/membership.h)
}

# A lost worker's gradients are missing from step `fromStep` on (on at
# least one chunk): the sampler deals its batches of the steps from there to
# the change again (een/membership.h UnfinishedSteps).
struct UnfinishedSteps {
  worker @0 :Int32;
  fromStep @1 :UInt64;
}

# Coordinator -> every PS, when a worker is lost: stop waiting for it now,
# hold pull answers beyond `maxVersion`, answer with MembershipPrepared.
struct MembershipPrepare {
  epoch @0 :UInt64;
  liveWorkers @1 :List(Int32);
  lostWorkers @2 :List(Int32);     # of those gone, the ones lost (not finished) that
                                   # the job goes on without: their groups' collectives
                                   # complete over the members left
}

struct MembershipPrepared {
  epoch @0 :UInt64;
  maxVersion @1 :UInt64;           # the newest version any chunk here has
  unfinished @2 :List(UnfinishedSteps);  # bsp: each lost worker's first step
                                   # missing from a chunk this PS owns
}

# One per een::StatusCode (common/error_codes.h maps them both ways).
enum ErrorCode {
  invalidArgument @0;
  staleEpoch @1;
  failedPrecondition @2;
  unavailable @3;
  internal @4;
  notFound @5;
  deadlineExceeded @6;
  aborted @7;
  resourceExhausted @8;
  permissionDenied @9;
  dataLoss @10;
  jobFinished @11;
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
  requestId @2 :UInt64;
}

# Who sends a control message (register, barrier, done, leave, hello,
# membershipPrepared): lets a restarted coordinator find its peers again.
struct Sender {
  role @0 :Role;
  rank @1 :Int32;
}

struct Header {
  sender @16 :Sender;
  union {
    register @0 :Register;
    jobStart @1 :JobStart;
    heartbeat @2 :Heartbeat;
    heartbeatReply @3 :HeartbeatReply;
    barrier @4 :Barrier;
    barrierReply @5 :Barrier;
    done @6 :UInt64;               # worker finished training after this many steps
    doneReply @7 :Void;
    push @8 :Push;
    pull @9 :Pull;
    pullReply @10 :PullReply;
    error @11 :Error;
    leave @12 :Void;               # PS acknowledges shutdown
    membershipPrepare @13 :MembershipPrepare;
    membershipPrepared @14 :MembershipPrepared;
    membershipCommit @15 :Membership;  # coordinator -> PS: stamp replies from effectiveStep on
    hello @17 :Void;               # to a restarted coordinator: this is my control connection
    rollback @18 :Rollback;        # coordinator -> surviving PS, after a PS was lost
    rolledBack @19 :Rollback;      # PS -> coordinator: done
    mapRequest @20 :Void;          # worker -> coordinator: the current map (a JobStart)
    replicate @21 :Replicate;      # primary PS -> backup PS
    replicated @22 :Replicate;     # backup PS -> primary PS: applied (no payload)
    mapChange @23 :ShardMap;       # coordinator -> PS: shards moved (failover, new PS)
    drain @24 :Int32;              # eenctl -> coordinator: move every shard off this PS,
                                   # then let it leave
    drainReply @25 :Text;          # coordinator -> eenctl: what moves where
    snapshotRequest @26 :Void;     # eenctl -> coordinator: a snapshot now (at a step
                                   # agreed with every PS, as for a membership change)
    obsoleteSnapshotReply @27 :Text;  # (eenctl of an earlier version: see snapshotTaken)
    workerExited @28 :WorkerExit;  # een-launch -> coordinator: a worker process ended
    normQuery @29 :NormQuery;      # worker -> PS (gradient clipping)
    normReply @30 :NormReply;      # PS -> worker
    clipNorm @31 :ClipNorm;        # worker -> PS
    processGone @32 :ProcessGone;  # een-launch -> coordinator: a role it started ended
    processGoneReply @33 :ProcessGoneReply;
    metricsRequest @34 :Void;      # eenctl -> coordinator: every process's metrics
    metricsReply @35 :MetricsReport;
    nodeStatus @36 :NodeStatus;    # een-launch of one node -> coordinator (per-node launch)
    nodeStatusReply @37 :NodeStatusReply;
    statusRequest @38 :Void;       # eenctl -> coordinator: how the job stands
    statusReply @39 :JobStatus;
    traceRequest @40 :TraceRequest;  # eenctl -> coordinator (eenctl debug --trace full)
    traceReply @41 :TraceReport;
    probeRequest @42 :Void;        # eenctl -> coordinator: measure every link, then a status
    probe @43 :Probe;              # worker -> PS (eenctl status --probe)
    probeReply @44 :Probe;         # PS -> worker
    batchClaim @45 :BatchClaim;    # worker -> coordinator: the next batch nobody has taken
    batchClaimReply @46 :BatchClaim;  # coordinator -> worker
    reduce @47 :Reduce;            # worker -> PS: a part of a collective (een backend)
    reduceReply @48 :ReduceReply;  # PS -> each contributor: the part's result
    awaitFinal @49 :UInt64;        # worker -> coordinator: finished training after this
                                   # many steps, as `done`, and waits for the job's final
                                   # values (HeartbeatReply.finalStep); answered doneReply
    finalTaken @50 :Void;          # worker -> coordinator: it holds them now (doneReply)
    snapshotTaken @51 :SnapshotTaken;  # coordinator -> eenctl: the snapshot it asked for
    psFault @52 :Text;             # PS -> coordinator: end the job for this reason (a
                                   # worker's NaN or infinite gradient, never applied)
  }
}

# The answer to eenctl's snapshotRequest: every PS snapshots `step` into its
# `folder`/ps-N store (on its own host).
struct SnapshotTaken {
  step @0 :UInt64;
  folder @1 :Text;                 # the job's --snapshot-dir, as the coordinator names it
  text @2 :Text;                   # what eenctl prints
}

# The `een` backend for torch.distributed (include/een/process_group.h):
# one part of one collective call of a process group. Every member sends
# its contribution to elements [offset, offset + numel) of call `seq` to the
# PS that part falls to; once all `contributors` have, the PS answers each
# with the result, reduced in rank order (the same bytes for all).
# Followed by one payload frame: numel elements of `dtype` (gather and
# broadcast: see ReduceOp).
struct Reduce {
  group @0 :UInt32;                # the process group (the same number on every member)
  seq @1 :UInt64;                  # the call's number in that group, from 1
  rank @2 :Int32;                  # the contributor's rank in the group
  contributors @3 :Int32;          # how many contribute (the group's size)
  op @4 :ReduceOp;
  dtype @5 :ElementType;
  offset @6 :UInt64;               # in elements of the whole tensor
  numel @7 :UInt64;                # this part's elements (each contributor's)
  total @8 :UInt64;                # the whole tensor's elements (every part must agree)
  root @9 :Int32;                  # broadcast: whose part is the result
  worker @10 :Int32;               # the sender's worker rank in the job (its identity)
  members @11 :List(Int32);        # the group's members' worker ranks, by group rank
                                   # (empty: group rank r is worker r); a part whose
                                   # member left the job fails at once
}

enum ReduceOp {
  sum @0;
  product @1;
  min @2;
  max @3;
  gather @4;                       # the result: every contribution, in rank order
                                   # (contributors x numel elements)
  broadcast @5;                    # the result: root's; the others send an empty frame
}

enum ElementType {
  f32 @0;
  f64 @1;
  f16 @2;
  bf16 @3;
  i32 @4;
  i64 @5;
  u8 @6;
  i8 @7;
}

# Followed by one payload frame with the result (none when `error` is set).
struct ReduceReply {
  group @0 :UInt32;
  seq @1 :UInt64;
  offset @2 :UInt64;
  error @3 :Text;                  # the part cannot complete (members disagree, too
                                   # large): why
  absent @4 :List(Int32);          # group ranks lost before sending their part: the
                                   # result is over the others (a float sum scaled by
                                   # contributors / those present)
}

# A worker process that een-launch saw end with `status` 0: before the job
# started it never joined (the program is not an EEN program); while the
# job runs without having called Finish(), it leaves like a finished one.
# een-launch saw the PS or worker process `pid` end (`what`: "was killed by
# SIGKILL") and is about to start a replacement: the coordinator declares it
# lost at once (before the job started: frees its rank), so the replacement
# takes its rank as soon as it registers. Only een-launch may send it.
struct ProcessGone {
  pid @0 :Int32;
  what @1 :Text;
  host @2 :Text;                   # its node (per-node launch: pids repeat across hosts)
}

struct ProcessGoneReply {
  jobStarted @0 :Bool;             # false: nothing was lost, any process may take the rank
  finished @1 :Bool;               # a worker that had finished training, or a PS after every
                                   # worker had: nothing to replace
  restartAll @2 :Bool;             # a worker no replacement can stand in for (torch.distributed's
                                   # een backend, --max-restarts): een-launch starts the whole
                                   # job again, every worker with the next restart count
}

struct WorkerExit {
  rank @0 :Int32;
  pid @1 :Int32;
  status @2 :Int32;
  host @3 :Text;                   # its node (per-node launch: pids repeat across hosts)
}

# Per-node launch (een-launch --nnodes N --node-rank R --rdzv HOST:PORT): the
# launcher of each node asks the coordinator (on node 0, at the rendezvous
# address) every heartbeat interval how the job stands. Its first answer is
# the rendezvous: only then does it start its roles. A launcher that fails or
# is interrupted says why in `failure`: the coordinator ends the job on every
# node with that reason. Only een-launch may send it.
struct NodeStatus {
  node @0 :Int32;                  # its node rank
  nnodes @1 :Int32;
  ps @2 :Int32;                    # the job's PS, as this launcher was told
  workers @3 :Int32;               # the job's workers, as this launcher was told
  host @4 :Text;                   # the node's name (EEN_NODE of its roles)
  pid @5 :Int32;                   # the launcher's pid on that host
  failure @6 :Text;                # non-empty: end the job for this reason
  minNodes @7 :Int32;              # elastic (--nnodes MIN:MAX): MIN, `nnodes` is MAX and
                                   # `ps`/`workers` are per node; 0: a fixed node count
  settings @8 :Text;               # the job-wide flags it was given ("replicas=2 ..."):
                                   # every node's must be node 0's
  sightings @9 :List(RoleSighting);  # its roles as its host's /proc shows them: the
                                   # coordinator tells a slow one from a stopped or
                                   # gone one on another host too
  attempt @10 :Int32;              # the job's restarts before this run of it
                                   # (TORCHELASTIC_RESTART_COUNT): a coordinator answers
                                   # but never counts a node of another run
  restart @11 :Bool;               # with `failure`: end the job for every node to start
                                   # every worker again (--max-restarts)
}

# What a node's een-launch sees of one of its roles (launcher/process_sighting.h).
struct RoleSighting {
  pid @0 :Int32;
  state @1 :ProcessState;
  cpuNanos @2 :UInt64;             # its threads' time on a CPU so far
}

enum ProcessState {
  elsewhere @0;                    # not seen (another namespace)
  gone @1;
  stopped @2;
  runnable @3;
  idle @4;
}

struct NodeStatusReply {
  state @0 :JobState;
  reason @1 :Text;                 # aborted: why
  lostPids @2 :List(Int32);        # this node's workers the coordinator declared lost
  refused @3 :Text;                # non-empty: this launcher is not part of the job (why)
  # Elastic jobs: the coordinator gives each node its ranks once the
  # rendezvous closed (the first nodes) or when the node joins later.
  assigned @4 :Bool;               # the fields below hold this node's share
  firstPs @5 :Int32;
  firstWorker @6 :Int32;
  numPs @7 :Int32;                 # the job's, when assigned
  worldSize @8 :Int32;
  nodesJoined @9 :Int32;           # launchers that met the coordinator so far
  restartWorkers @10 :List(Int32); # lost workers of a lost node (its launcher silent too)
                                   # that this node starts replacements for (--max-restarts)
  torchStore @11 :Text;            # "HOST:PORT" of node 0's torch.distributed store (the
                                   # workers' MASTER_ADDR:MASTER_PORT); "": none
  attempt @12 :Int32;              # the coordinator's run of the job (NodeStatus.attempt):
                                   # a node of an earlier one starts its workers again
  restartEveryWorker @13 :Bool;    # aborted for every node to start every worker again
}

# A primary PS keeps its backup in step: for each chunk either the mean
# gradient of step `versions[i]` (the backup applies the same optimizer, so
# both stay bitwise equal) or, with `image`, the whole chunk (values, then
# each optimizer state slot) at version `versions[i]`. One payload frame per
# chunk. The answer, `replicated`, lists each chunk's version after applying.
struct Replicate {
  epoch @0 :UInt64;
  from @1 :Int32;                  # the sending PS's index
  image @2 :Bool;
  chunks @3 :List(UInt32);
  versions @4 :List(UInt64);
  lrs @5 :List(Float64);           # mean gradients: the learning rate each step was applied with
  norms @6 :List(Float64);         # and the total norm it was clipped with (0: not clipped)
  workers @7 :List(Int32);         # ssp/async mean gradients: whose gradient each was
  workerSteps @8 :List(UInt64);    # and its step; images: each chunk's steps applied per
                                   # worker (chunks x workers, row by row)
}

# Every PS goes back to its snapshot of `step` and takes map epoch `epoch`.
struct Rollback {
  epoch @0 :UInt64;
  step @1 :UInt64;
}

# What the coordinator keeps in its RocksDB, to restart without losing the job.
struct NodeRecord {
  role @0 :Role;
  rank @1 :Int32;
  host @2 :Text;
  pid @3 :Int32;
  dataAddress @4 :Text;
  done @5 :Bool;
  lost @6 :Bool;
  step @7 :UInt64;
  joining @8 :Bool;                # worker: waiting for the step it joins at
  joinStep @9 :UInt64;             # worker: the step it joined a running job at (0: the start)
  localAddress @10 :Text;          # PS: its same-host address
  awaitsFinal @11 :Bool;           # worker: finished, waiting for the final values
  finalTaken @12 :Bool;            # worker: has them (or gave up on them)
}

struct CoordinatorState {
  state @0 :JobState;
  tensors @1 :List(TensorSpec);
  optimizer @2 :OptimizerConfig;
  nodes @3 :List(NodeRecord);
  membershipEpoch @4 :UInt64;
  liveWorkers @5 :List(Int32);
  completeSnapshot @6 :UInt64;
  startStep @7 :UInt64;
  resume @8 :Bool;
  mapEpoch @9 :UInt64;
  map @10 :ShardMap;               # once the job started: owners and backups
  rollbackEpoch @11 :UInt64;
  mapMoved @12 :Bool;              # a failover moved shards: snapshots no longer fit
  history @13 :List(Membership);
  workerReplacements @14 :Int32;   # replacement workers accepted so far (--max-restarts)
  rollbackStep @15 :UInt64;        # the step the latest rollback went back to
  nextBatch @16 :UInt64;           # NextBatch(): the next batch to deal, as of this save
                                   # (saved every 256 batches dealt)
  dataBatch @17 :UInt64;           # the samplers' batch size (JobStart.dataBatch)
  dataLookAhead @18 :UInt32;       # the workers' largest (Heartbeat.dataLookAhead)
}
