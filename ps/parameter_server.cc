#include "ps/parameter_server.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "common/error_codes.h"
#include "common/logging.h"
#include "common/optimizer_wire.h"
#include "common/private_folder.h"
#include "common/resource_usage.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "ps/ps_messages.h"

namespace een::ps {

using std::chrono::milliseconds;
using transport::Frame;
using transport::Message;
using Clock = std::chrono::steady_clock;

constexpr int kMaxWorkers = 1 << 20;  // a sanity bound on worker ranks from the coordinator

Status ParameterServer::Join(const std::atomic<bool>& stop) {
  resources_at_step_ = env_.resources_at_step;
  // "auto": tcp for other hosts, and shared memory for this one, whose
  // device then holds the store (shm peers read parameters in place).
  const std::vector<std::string> addresses = env_.DataListenAddresses();
  EEN_ASSIGN_OR_RETURN(transport::Device * data_device, transport::DeviceFor(addresses.back()));
  EEN_ASSIGN_OR_RETURN(listener_, transport::ListenOnAll(addresses));
  data_device_ = data_device;
  // Collective results go to every contributor in place where the listener can.
  collectives_.set_frame_maker([this](size_t size) { return listener_->NewFrame(size); });
  const std::string local_address = addresses.size() > 1 ? addresses.back() : "";
  if (local_address.empty()) {
    spdlog::info("data plane: {} on {}", data_device->name(), listener_->address());
  } else {
    spdlog::info("data plane: zeromq on {} for other hosts, {} on {} for this one",
                 listener_->address(), data_device->name(), local_address);
  }
  spdlog::debug("{}", transport::DescribeHardware());  // no transport asks for RDMA yet
  EEN_ASSIGN_OR_RETURN(transport::Device * control_device, transport::DeviceFor(env_.coordinator));
  EEN_ASSIGN_OR_RETURN(control_, control_device->Connect(env_.coordinator));
  ps_messages::SnapshotsFound found;
  if (!env_.spare) EEN_RETURN_IF_ERROR(OpenSnapshots(&found));  // a spare: once it has a rank
  auto send_register = [&]() -> Status {
    return control_->Send(ps_messages::Register(
        env_.rank, HostName(), getpid(), listener_->address(), local_address, env_.spare, found));
  };
  EEN_RETURN_IF_ERROR(send_register());
  if (env_.spare) spdlog::info("standing by as a spare PS");
  // Registration is repeated every second until the job starts: a
  // coordinator restarted meanwhile (it forgets who registered before the
  // start) learns of this PS again; the same process registering twice is
  // no error.
  const auto deadline = Clock::now() + env_.startup_timeout;
  auto next_register = Clock::now() + std::chrono::seconds(1);
  OptimizerConfig optimizer;
  int workers = 0;
  bool started = false;
  bool resume = false;
  bool rebuild = false;
  Consistency consistency;
  uint64_t start_step = 0;
  std::vector<int> live;  // the newest membership, for a PS that starts mid-job
  uint64_t membership_epoch = 0, membership_step = 0;
  std::vector<MembershipChange> history;  // their batch shares (--dynamic-slicing)
  while (!started) {
    if (stop) return Aborted("stopped before the job started");
    if (!env_.spare && Clock::now() > deadline) {
      return DeadlineExceeded("no job start from the coordinator at " + env_.coordinator +
                              " within " + std::to_string(env_.startup_timeout.count()) + " ms");
    }
    if (Clock::now() > next_register) {  // a coordinator restarted meanwhile learns of us
      EEN_RETURN_IF_ERROR(send_register());
      next_register = Clock::now() + std::chrono::seconds(1);
    }
    auto reply = control_->Receive(milliseconds(100));
    if (!reply.ok() && reply.status().code() == StatusCode::kPermissionDenied)
      return reply.status();
    if (!reply.ok()) continue;
    EEN_RETURN_IF_ERROR(wire::Visit(*reply, [&](wire::Header::Reader h) -> Status {
      if (h.isError()) return StatusOf(h.getError(), "coordinator refused this PS: ");
      if (env_.spare && h.isHeartbeatReply() &&
          h.getHeartbeatReply().getState() != wire::JobState::RUNNING) {
        not_needed_ = true;
        return Status::Ok();
      }
      if (!h.isJobStart()) return Status::Ok();
      auto js = h.getJobStart();
      EEN_ASSIGN_OR_RETURN(map_, ShardMap::FromWire(js.getMap()));
      EEN_ASSIGN_OR_RETURN(optimizer, OptimizerFromWire(js.getOptimizer()));
      workers = js.getWorldSize();
      resume = js.getResume();
      start_step = js.getStartStep();
      rebuild = js.getRebuild();
      if (js.hasConsistency() && js.getConsistency().size() > 0) {
        EEN_ASSIGN_OR_RETURN(consistency, Consistency::Parse(js.getConsistency()));
      }
      if (js.getHistory().size() > 0) {
        auto last = js.getHistory()[js.getHistory().size() - 1];
        membership_epoch = last.getEpoch();
        membership_step = last.getEffectiveStep();
        for (int w : last.getLiveWorkers()) live.push_back(w);
      }
      for (auto m : js.getHistory()) history.push_back(wire::MembershipFromWire(m));
      if (js.getRank() != env_.rank) env_.rank = js.getRank();
      started = true;
      return Status::Ok();
    }));
    if (not_needed_) return Status::Ok();
  }
  job_started_ = true;
  if (env_.spare) {
    spdlog::warn("this spare takes over as ps {}", env_.rank);
    transport::SetIdentity(transport::PsIdentity(env_.rank));  // its connections from now on
    EEN_RETURN_IF_ERROR(OpenSnapshots(&found));
  }
  if (env_.rank < 0 || static_cast<uint32_t>(env_.rank) >= map_.num_ps()) {
    return InvalidArgument("PS rank " + std::to_string(env_.rank) + " is not in the shard map");
  }
  EEN_ASSIGN_OR_RETURN(store_,
                       ChunkStore::Create(map_, env_.rank, workers, optimizer, data_device_));
  apply_pool_ = std::make_unique<ApplyPool>(env_.ps_threads > 0 ? env_.ps_threads
                                                                : ApplyPool::DefaultThreads());
  store_->SetApplyPool(apply_pool_.get());
  // (Sum mode and clipping under ssp/async: the coordinator refuses the job.)
  store_->SetConsistency(consistency);
  for (const MembershipChange& change : history)
    EEN_RETURN_IF_ERROR(store_->AddBatchShares(change));
  if (!history.empty()) {
    batch_shares_ = history.back().shares;
    membership_unfinished_ = history.back().unfinished;
    membership_data_step_ = history.back().data_step;
  }
  if (consistency.per_arrival()) {
    spdlog::info(
        "consistency {}: each gradient is applied as it arrives, as 1/N of a step (the "
        "optimizer at {})",
        consistency.Name(), store_->PerArrivalRule());
  }
  epoch_ = map_.epoch();
  if (rebuild) {
    spdlog::info(
        "joining the running job (shard map epoch {}): {} backup chunk(s) arrive as "
        "images from their primaries",
        epoch_, store_->owned_chunks());
  } else if (resume) {
    if (!snapshots_) {
      return FailedPrecondition("asked to resume, but " +
                                (env_.snapshot_dir.empty()
                                     ? std::string("no snapshot folder was given")
                                     : SnapshotPath() + " holds no snapshot"));
    }
    EEN_ASSIGN_OR_RETURN(std::vector<ChunkImage> images, snapshots_->Read(start_step));
    EEN_RETURN_IF_ERROR(store_->Restore(images, start_step));
    step_ = start_step;
    TrustBackups();
    spdlog::info("restored the snapshot of step {} from {}", start_step, snapshots_->path());
  }
  if (!snapshots_ && !env_.snapshot_dir.empty() && env_.snapshot_every > 0) {
    // A folder not created while resuming (it held nothing): created now.
    EEN_ASSIGN_OR_RETURN(snapshots_, SnapshotStore::Open(SnapshotPath()));
  }
  if (snapshots_ && env_.snapshot_every > 0) {
    next_snapshot_ = (store_->CompletedStep() / env_.snapshot_every + 1) * env_.snapshot_every;
    writer_ = std::make_unique<SnapshotWriter>(std::move(snapshots_), &metrics_);
  }
  if (membership_epoch > 0) {  // workers were lost before this PS started
    for (int w = 0; w < store_->num_workers(); ++w) {
      // No step completes by it: this PS has not started serving.
      if (std::find(live.begin(), live.end(), w) == live.end()) (void)store_->RemoveWorker(w);
    }
    membership_epoch_ = membership_epoch;
    membership_step_ = membership_step;
  }
  live_workers_ = store_->LiveWorkers();
  NoteChunksReady();
  if (IsProcessGroupModel(map_.tensors())) {
    spdlog::info("serving the collectives of {} workers (torch.distributed's een backend)",
                 workers);
  } else {
    spdlog::info(
        "holding {} chunks ({} of them as backup; {} bytes of arena) for {} workers; "
        "optimizer {}",
        store_->owned_chunks(), store_->owned_chunks() - map_.ChunksOwnedBy(env_.rank).size(),
        store_->arena().size(), workers, OptimizerName(optimizer.kind));
  }
  EEN_ASSIGN_OR_RETURN(
      heartbeat_, HeartbeatSender::Start(
                      env_.coordinator, env_.heartbeat_interval, env_.failover_threshold, &metrics_,
                      [this](wire::Heartbeat::Builder hb) {
                        hb.setRole(wire::Role::PS);
                        hb.setRank(env_.rank);
                        hb.setPid(getpid());
                        hb.setStep(step_.load());
                        if (writer_) hb.setSnapshotStep(writer_->written_step());
                        hb.setChunksReady(chunks_ready_.load());
                        FillWaits(hb);
                      },
                      &recorder_));
  return Status::Ok();
}

void ParameterServer::ReportJoinFailure(const Status& why) {
  if (!job_started_ || !control_) return;
  if (Status s = control_->Send(wire::MakeError(WireCodeOf(why.code()), why.message())); !s.ok()) {
    Ignored(s, "telling the coordinator why this PS stops");
    return;
  }
  // Its answer comes once the job's verdict is written: een-launch, which
  // sees this process end, then names the cause.
  (void)control_->Receive(std::chrono::seconds(2));
}

Status ParameterServer::OpenSnapshots(ps_messages::SnapshotsFound* found) {
  if (env_.snapshot_dir.empty()) return Status::Ok();
  std::error_code ec;
  MakePrivateFolder(env_.snapshot_dir, ec);
  if (ec) {
    return Unavailable("cannot create the snapshot folder " + env_.snapshot_dir + ": " +
                       ec.message());
  }
  const std::string path = SnapshotPath();
  if (env_.resume && !std::filesystem::exists(path, ec)) {
    // Nothing to resume from (was the run started with fewer PS?): the
    // folder is not created; it is opened for writing if the job starts.
    found->none = true;
    found->problem = path + " holds no snapshot";
    spdlog::info("no snapshot in {}: the folder does not exist", path);
    return Status::Ok();
  }
  EEN_ASSIGN_OR_RETURN(snapshots_, SnapshotStore::Open(path));
  if (!env_.resume) {
    found->earlier = snapshots_->Steps();  // the coordinator refuses a new run over them
    return Status::Ok();
  }
  std::vector<std::string> problems;
  found->intact = snapshots_->IntactSteps(&problems);
  for (const std::string& p : problems) spdlog::warn("refusing a snapshot: {}", p);
  spdlog::info(
      "{} intact snapshot(s) in {}{}", found->intact.size(), snapshots_->path(),
      found->intact.empty() ? "" : ", newest of step " + std::to_string(found->intact.front()));
  if (found->intact.empty()) {
    found->none = problems.empty();
    found->problem =
        problems.empty() ? snapshots_->path() + " holds no snapshot" : problems.front();
  }
  return Status::Ok();
}

void ParameterServer::MaybeSnapshot() {
  if (!writer_) return;
  const uint64_t step = store_->CompletedStep();
  const bool on_demand = on_demand_snapshot_ > 0 && step >= on_demand_snapshot_;
  if (step < next_snapshot_ && !on_demand) return;
  if (on_demand) on_demand_snapshot_ = 0;
  next_snapshot_ = (step / env_.snapshot_every + 1) * env_.snapshot_every;
  const auto start = std::chrono::steady_clock::now();
  std::vector<ChunkImage> images = store_->Capture();  // the only pause training sees
  const auto stall = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  if (!writer_->Submit(step, std::move(images), stall)) {
    spdlog::warn("snapshot of step {} skipped: the previous one is still being written", step);
  }
}

Status ParameterServer::Serve(const std::atomic<bool>& stop) {
  while (true) {
    if (stop) return Status::Ok();
    if (const uint64_t inc = heartbeat_->incarnation(); inc != incarnation_) {
      if (incarnation_ != 0) {  // a restarted coordinator: tell it our control connection
        spdlog::info("the coordinator restarted; greeting it");
        Ignored(control_->Send(ps_messages::Hello(env_.rank)),
                "greeting the restarted coordinator");
      }
      incarnation_ = inc;
    }
    if (heartbeat_->state() == HeartbeatSender::State::kShutdown) {
      Ignored(control_->Send(ps_messages::Leave(env_.rank)),
              "telling the coordinator this PS leaves");
      if (IsProcessGroupModel(map_.tensors())) {
        spdlog::info("job finished; leaving");
      } else {
        spdlog::info("job finished; leaving after {} {}", step_.load(),
                     store_->consistency().per_arrival() ? "updates (one per gradient)" : "steps");
      }
      return Status::Ok();
    }
    if (heartbeat_->state() == HeartbeatSender::State::kAborted) {
      return Aborted(heartbeat_->reason());
    }
    auto control = control_->Receive(milliseconds(0));
    if (control.ok()) {
      if (Status s = HandleControl(*control); !s.ok()) {
        spdlog::warn("dropped a bad message from the coordinator: {}", s.ToString());
      }
    }
    auto envelope = listener_->Receive(milliseconds(20));
    if (envelope.ok()) {
      Handle(*envelope);
    } else if (envelope.status().code() != StatusCode::kDeadlineExceeded) {
      spdlog::warn("dropped a message that could not be read: {}", envelope.status().message());
    }
    // A worker's NaN or infinite gradient, not applied: the coordinator ends the job for it.
    if (!fault_said_ && !store_->nonfinite().empty()) {
      fault_said_ = true;
      spdlog::error("{}", store_->nonfinite());
      Ignored(control_->Send(ps_messages::Fault(env_.rank, store_->nonfinite())),
              "telling the coordinator of a NaN or infinite gradient");
    }
    const auto now = Clock::now();
    if (now >= next_wait_check_) {  // what waits, ten times a second
      next_wait_check_ = now + milliseconds(100);
      ExpirePulls();
      ReportStall();
      NoteWaits();
    }
  }
}

void ParameterServer::ReportStall() {
  const auto now = Clock::now();
  const auto stall = store_->OldestStall();
  if (!stall || stall->step == stall_reported_step_ || stall->missing.empty()) return;
  const auto waited = std::chrono::duration_cast<milliseconds>(now - stall->since);
  if (waited < env_.failover_threshold) return;
  stall_reported_step_ = stall->step;
  std::string who;
  for (int w : stall->missing) who += (who.empty() ? "" : ", ") + std::to_string(w);
  const Chunk& chunk = map_.chunks()[stall->chunk];
  spdlog::warn(
      "step {} has waited {} ms for the gradients of worker(s) {} (chunk {}: tensor '{}' "
      "elements {}-{}, virtual shard {})",
      stall->step, waited.count(), who, stall->chunk, map_.tensors()[chunk.tensor].name,
      chunk.offset, chunk.offset + chunk.numel - 1, chunk.shard);
}

void ParameterServer::NoteWaits() {
  WaitReport report;
  // Only a wait that has lasted a while is one: in a fast job some step is
  // always partly pushed for a moment, and this snapshot is read up to a
  // check period later (heartbeats), when that step is long done.
  if (auto stall = store_->OldestStall(); stall && Clock::now() - stall->since >= kReportedWait) {
    report.stall = std::move(stall);
  }
  if (map_.replicated()) {
    for (uint32_t c = 0; c < map_.chunks().size(); ++c) {
      if (!store_->Owns(c) || map_.BackupOfChunk(c) == ShardMap::kNoPs || store_->Acked(c) < 0)
        continue;
      const uint64_t acked = static_cast<uint64_t>(store_->Acked(c));
      const uint64_t version = store_->Version(c);
      if (version > acked)
        report.replication_lag = std::max(report.replication_lag, version - acked);
    }
  }
  std::lock_guard<std::mutex> lock(wait_report_mu_);
  wait_report_ = std::move(report);
}

void ParameterServer::FillWaits(wire::Heartbeat::Builder hb) const {
  std::lock_guard<std::mutex> lock(wait_report_mu_);
  hb.setReplicationLag(wait_report_.replication_lag);
  const auto& stall = wait_report_.stall;
  if (!stall || stall->missing.empty()) return;
  hb.setHasWait(true);
  auto wait = hb.initWait();
  wait.setStep(stall->step);
  wait.setChunk(stall->chunk);
  auto missing = wait.initMissing(stall->missing.size());
  for (size_t i = 0; i < stall->missing.size(); ++i) missing.set(i, stall->missing[i]);
  wait.setWaitedMs(static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(Clock::now() - stall->since).count()));
}

ParameterServer::ControlHandler ParameterServer::ControlMessageOf(wire::Header::Which kind) {
  using P = ParameterServer&;
  using H = wire::Header::Reader;
  struct Row {  // trivially destructible: see DataMessageOf
    wire::Header::Which kind;
    ControlHandler handle;
  };
  static const Row kTable[] = {
      {wire::Header::MEMBERSHIP_PREPARE,
       [](P ps, H h) { return ps.HandleMembershipPrepare(h.getMembershipPrepare()); }},
      {wire::Header::MEMBERSHIP_COMMIT,
       [](P ps, H h) { return ps.HandleMembershipCommit(h.getMembershipCommit()); }},
      {wire::Header::ROLLBACK,
       [](P ps, H h) {
         return ps.HandleRollback(h.getRollback().getEpoch(), h.getRollback().getStep());
       }},
      {wire::Header::MAP_CHANGE,
       [](P ps, H h) -> Status {
         EEN_ASSIGN_OR_RETURN(ShardMap next, ShardMap::FromWire(h.getMapChange()));
         return ps.AdoptMap(std::move(next));
       }},
  };
  for (const Row& row : kTable) {
    if (row.kind == kind) return row.handle;
  }
  return nullptr;
}

Status ParameterServer::HandleControl(const Message& message) {
  return wire::Visit(message, [&](wire::Header::Reader h) -> Status {
    const ControlHandler handle = ControlMessageOf(h.which());
    if (!handle) return Status::Ok();  // job start repeats and the like: nothing to do
    return handle(*this, h);
  });
}

Status ParameterServer::HandleMembershipPrepare(wire::MembershipPrepare::Reader prepare) {
  std::vector<bool> keep(store_->num_workers(), false);
  for (int w : prepare.getLiveWorkers()) {
    if (w < 0 || w > kMaxWorkers) return InvalidArgument("live worker out of range");
    if (w < store_->num_workers()) keep[w] = true;  // a new rank is added at the commit
  }
  std::vector<uint32_t> completed;  // applied (with clipping, maybe only aggregated)
  std::vector<UnfinishedSteps> unfinished;
  for (int w : prepare.getLostWorkers()) {
    if (w < 0 || w > kMaxWorkers) return InvalidArgument("lost worker out of range");
    if (w < static_cast<int>(keep.size()) && keep[w]) continue;  // lost, then replaced
    for (const CollectiveResult& done : collectives_.WorkerLost(w)) AnswerCollective(done);
  }
  for (int w = 0; w < store_->num_workers(); ++w) {
    if (!keep[w] && store_->IsLive(w)) {
      bool lost = false;
      for (int l : prepare.getLostWorkers()) lost |= l == w;
      const std::optional<uint64_t> missing = store_->FirstStepMissing(w);
      if (lost && missing) {
        unfinished.push_back({w, *missing});
      }
      const std::vector<uint32_t> done = store_->RemoveWorker(w);
      completed.insert(completed.end(), done.begin(), done.end());
      if (IsProcessGroupModel(map_.tensors())) {
        spdlog::info("worker {} left the job ({}): {}", w, lost ? "lost" : "finished",
                     lost ? "its groups' collectives go on without it"
                          : "a collective still waiting for it fails");
      } else {
        spdlog::info(
            "worker {} left the job (finished, or lost): no step waits for it any "
            "more ({} chunk(s) completed without it)",
            w, done.size());
      }
      for (const CollectiveResult& failed : collectives_.WorkerLeft(w)) AnswerCollective(failed);
    }
  }
  frozen_ = true;
  // ssp/async: pulls ask for a worker's own step, not a chunk version.
  freeze_above_ =
      store_->consistency().per_arrival() ? store_->NewestWorkerStep() : store_->MaxVersion();
  EEN_RETURN_IF_ERROR(control_->Send(
      ps_messages::MembershipPrepared(env_.rank, prepare.getEpoch(), freeze_above_, unfinished)));
  AfterCompletion(completed);
  return Status::Ok();
}

Status ParameterServer::HandleRollback(uint64_t epoch, uint64_t step) {
  if (!writer_) return FailedPrecondition("asked to roll back, but this PS keeps no snapshots");
  // RocksDB reads are safe beside the writer thread's writes.
  EEN_ASSIGN_OR_RETURN(std::vector<ChunkImage> images, writer_->store().Read(step));
  EEN_RETURN_IF_ERROR(store_->Restore(images, step));
  TrustBackups();
  epoch_ = epoch;
  NoteChunksReady();
  DropPendingRequests();  // asked under the old map: the workers ask again
  step_ = step;
  next_snapshot_ = (step / env_.snapshot_every + 1) * env_.snapshot_every;
  spdlog::warn("rolled back to the snapshot of step {}; shard map epoch {}", step, epoch);
  EEN_RETURN_IF_ERROR(control_->Send(ps_messages::RolledBack(env_.rank, epoch, step)));
  // Workers that heard of the rollback first sent with its epoch: theirs now.
  ReplayFutureMessages();
  return Status::Ok();
}

Status ParameterServer::HandleMembershipCommit(wire::Membership::Reader commit) {
  if (commit.getEpoch() <= membership_epoch_) return Status::Ok();  // a repeat
  const MembershipChange change = wire::MembershipFromWire(commit);
  EEN_RETURN_IF_ERROR(store_->AddBatchShares(change));
  batch_shares_ = change.shares;
  membership_unfinished_ = change.unfinished;
  membership_data_step_ = change.data_step;
  membership_epoch_ = commit.getEpoch();
  membership_step_ = commit.getEffectiveStep();
  live_workers_.clear();
  for (int w : commit.getLiveWorkers()) {
    live_workers_.push_back(w);
    if (store_->IsLive(w)) continue;
    EEN_RETURN_IF_ERROR(store_->AddWorker(w, membership_step_));
    spdlog::info("worker {} joins: every step from {} waits for it", w, membership_step_);
  }
  if (commit.getSnapshotStep() > 0 && writer_) {
    on_demand_snapshot_ = commit.getSnapshotStep();
    MaybeSnapshot();  // this PS may be there already (nothing moved past it: frozen)
  }
  frozen_ = false;
  if (IsProcessGroupModel(map_.tensors())) return Status::Ok();  // no steps: said above
  spdlog::info("membership {}: {} workers from step {}{}", membership_epoch_, live_workers_.size(),
               membership_step_,
               batch_shares_.empty()
                   ? std::string()
                   : fmt::format(", each gradient weighing its share of the batch ({})",
                                 fmt::join(batch_shares_, ",")));
  AnswerReadyPulls();
  return Status::Ok();
}

void ParameterServer::NoteChunksReady() {
  if (chunks_ready_.load() != epoch_ && store_->AllInitialized()) chunks_ready_ = epoch_;
}

void ParameterServer::StepsCompleted(const std::vector<uint32_t>& completed) {
  const auto now = Clock::now();
  for (uint32_t c : completed) {
    if (store_->Version(c) > 0)
      recorder_.Record(EventKind::kApplied, store_->Version(c) - 1, now, c);
  }
  step_ = std::max<uint64_t>(step_.load(), store_->MinVersion());
  if (resources_at_step_ > 0 && step_ >= resources_at_step_) {
    // een-bench's mark: the steps after it are the steady state.
    spdlog::info("at step {}: {}", step_.load(), ResourceUsage::Now().ToString());
    resources_at_step_ = 0;
  }
  MaybeSnapshot();  // before the answers: no worker can move the chunks on yet
  ReplicateSteps(completed);
  AnswerReadyPulls();
}

void ParameterServer::SendError(const transport::PeerId& peer, wire::ErrorCode code,
                                const std::string& text, uint64_t request_id) {
  // Routed with an old map: expected for a moment after every map change.
  // The peer's routing id names its identity with CURVE ("worker:1/..."),
  // after any byte of a listener set; other ids are binary.
  std::string who;
  for (char c : peer) {
    if (c >= 0x20 && c < 0x7f) who += c;
  }
  const std::string line =
      "refused a message from " + (who.size() <= 16 ? std::string("a worker") : who) + ": " + text;
  if (code == wire::ErrorCode::STALE_EPOCH) {
    spdlog::info("{}", line);
  } else {
    WarnCounted(KindOf(text), line);  // a flood of bad messages is counted, not echoed
  }
  refused_.Add();
  if (Status s = listener_->Send(peer, wire::MakeError(code, text, request_id)); !s.ok()) {
    spdlog::debug("could not tell the sender why: {}", s.ToString());  // it may be gone
  }
}

const ParameterServer::DataMessage* ParameterServer::DataMessageOf(wire::Header::Which kind) {
  using H = wire::Header::Reader;
  using E = const transport::Envelope&;
  // A plain array, not a map: trivially destructible (threads still
  // handling messages while the process exits never meet a destroyed
  // table), and six rows are found faster by a scan than in a tree.
  struct Row {
    wire::Header::Which kind;
    DataMessage message;
  };
  static const Row kTable[] = {
      {wire::Header::PUSH,
       {[](H h) { return h.getPush().getEpoch(); },
        [](H h) { return transport::WorkerIdentity(h.getPush().getWorker()); },
        [](ParameterServer& ps, E e, H h) {
          return ps.HandlePush(e.from, h.getPush(), e.message);
        }}},
      {wire::Header::PULL,
       {[](H h) { return h.getPull().getEpoch(); },
        [](H h) { return transport::WorkerIdentity(h.getPull().getWorker()); },
        [](ParameterServer& ps, E e, H h) { return ps.HandlePull(e.from, h.getPull()); }}},
      {wire::Header::NORM_QUERY,
       {[](H h) { return h.getNormQuery().getEpoch(); },
        [](H h) { return transport::WorkerIdentity(h.getNormQuery().getWorker()); },
        [](ParameterServer& ps, E e, H h) {
          return ps.HandleNormQuery(e.from, h.getNormQuery());
        }}},
      {wire::Header::CLIP_NORM,
       {[](H h) { return h.getClipNorm().getEpoch(); },
        [](H h) { return transport::WorkerIdentity(h.getClipNorm().getWorker()); },
        [](ParameterServer& ps, E, H h) { return ps.HandleClipNorm(h.getClipNorm()); }}},
      {wire::Header::REPLICATE,
       {[](H h) { return h.getReplicate().getEpoch(); },
        [](H h) { return transport::PsIdentity(h.getReplicate().getFrom()); },
        [](ParameterServer& ps, E e, H h) {
          return ps.HandleReplicate(h.getReplicate(), e.message);
        }}},
      // eenctl status --probe: bytes to confirm, with no epoch of their own.
      {wire::Header::PROBE,
       {[](H) { return uint64_t{0}; },
        [](H h) { return transport::WorkerIdentity(h.getProbe().getWorker()); },
        [](ParameterServer& ps, E e, H h) -> Status {
          // At most a few MiB: a probe is a short test, not a transfer.
          constexpr size_t kMaxProbeBytes = size_t{16} << 20;
          if (e.message.payload_count() != 1 || e.message.payload(0).size() > kMaxProbeBytes) {
            return InvalidArgument("a probe carries one payload frame of at most 16 MiB");
          }
          return ps.listener_->Send(e.from,
                                    ps_messages::ProbeReply(ps.env_.rank, h.getProbe().getRound(),
                                                            h.getProbe().getWorker()));
        }}},
      // The een backend's collectives: independent of the shard map.
      {wire::Header::REDUCE,
       {[](H) { return uint64_t{0}; },
        [](H h) { return transport::WorkerIdentity(h.getReduce().getWorker()); },
        [](ParameterServer& ps, E e, H h) {
          return ps.HandleReduce(e.from, h.getReduce(), e.message);
        }}},
      // An answer to a replication: routed with no epoch of its own.
      {wire::Header::REPLICATED,
       {[](H) { return uint64_t{0}; },
        [](H h) { return transport::PsIdentity(h.getReplicated().getFrom()); },
        [](ParameterServer& ps, E, H h) { return ps.HandleReplicated(h.getReplicated()); }}},
  };
  for (const Row& row : kTable) {
    if (row.kind == kind) return &row.message;
  }
  return nullptr;
}

void ParameterServer::Handle(const transport::Envelope& envelope) {
  Status s = wire::Visit(envelope.message, [&](wire::Header::Reader h) -> Status {
    const DataMessage* kind = DataMessageOf(h.which());
    if (!kind)
      return InvalidArgument(
          "a PS takes only push, pull, norm, replication and collective messages");
    // A message speaks only for the identity its connection authenticated as.
    if (!envelope.authenticated.empty()) {
      const std::string claimed = kind->speaks_for(h);
      if (claimed != envelope.authenticated) {
        return InvalidArgument("this connection authenticated as '" + envelope.authenticated +
                               "' and cannot speak for '" + claimed + "'");
      }
    }
    if (kind->epoch(h) > epoch_) {  // routed with a map this PS has not received yet
      // Bounded in count and bytes: a step's pushes of every worker fit.
      constexpr size_t kMaxFutureMessages = 100000, kMaxFutureBytes = size_t{1} << 30;
      size_t bytes = 0;
      for (const auto& f : envelope.message.frames) bytes += f.size();
      if (future_.size() >= kMaxFutureMessages || future_bytes_ + bytes > kMaxFutureBytes) {
        return Unavailable("too many messages of a future map epoch (" +
                           std::to_string(future_.size()) + ", " + std::to_string(future_bytes_) +
                           " bytes) wait for this PS's map change; refused");
      }
      future_bytes_ += bytes;
      future_.push_back(envelope);
      return Status::Ok();
    }
    return kind->handle(*this, envelope, h);
  });
  if (!s.ok()) {
    SendError(envelope.from, WireCodeOf(s.code()),
              "PS " + std::to_string(env_.rank) + ": " + s.message(), 0);
  }
}

Status ParameterServer::CheckChunks(capnp::List<uint32_t>::Reader chunks) {
  std::set<uint32_t> seen;
  for (uint32_t c : chunks) {
    if (!store_->Owns(c)) {
      return InvalidArgument("chunk " + std::to_string(c) + " is not held by this PS");
    }
    if (!seen.insert(c).second)
      return InvalidArgument("chunk " + std::to_string(c) + " listed twice");
  }
  return Status::Ok();
}

Status ParameterServer::HandlePush(const transport::PeerId& peer, wire::Push::Reader push,
                                   const Message& message) {
  const auto received = Clock::now();
  pushes_.Add();
  push_bytes_.Add(message.payload_bytes());
  if (push.getEpoch() != epoch_) {
    return StaleEpoch("push with shard map epoch " + std::to_string(push.getEpoch()) +
                      ", current epoch is " + std::to_string(epoch_));
  }
  const int worker = push.getWorker();
  if (worker < 0 || worker >= store_->num_workers()) {
    return InvalidArgument("push from worker rank " + std::to_string(worker) + " of " +
                           std::to_string(store_->num_workers()));
  }
  // Initial values fill only chunks that have none, so they are taken from
  // worker 0 whatever its state: its replacement sends them before this PS
  // may have heard that it joined (the lost one may have died before it
  // sent them all).
  if (!store_->IsLive(worker) && push.getKind() != wire::PushKind::INITIAL) {
    return FailedPrecondition("worker " + std::to_string(worker) +
                              " was declared lost and is no longer part of the job");
  }
  EEN_ASSIGN_OR_RETURN(const WireType type, wire::WireTypeOf(push.getDtype(), "push payload"));
  if (push.getKind() == wire::PushKind::INITIAL && type != WireType::kF32) {
    return InvalidArgument("initial values must be f32 (they become the master values)");
  }
  auto chunks = push.getChunks();
  if (chunks.size() != message.payload_count()) {
    return InvalidArgument("push lists " + std::to_string(chunks.size()) + " chunks but carries " +
                           std::to_string(message.payload_count()) + " payload frames");
  }
  EEN_RETURN_IF_ERROR(CheckChunks(chunks));
  const bool initial = push.getKind() == wire::PushKind::INITIAL;
  const bool state = push.getKind() == wire::PushKind::STATE;
  if (state && type != WireType::kF32) return InvalidArgument("a checkpoint's state must be f32");
  for (uint32_t i = 0; i < chunks.size(); ++i) {
    const size_t numel = store_->Numel(chunks[i]);
    const size_t want = initial ? numel * sizeof(float)
                        : state ? store_->ImageFloats(chunks[i]) * sizeof(float)
                                : store_->ContributionBytes(chunks[i], type);
    if (message.payload(i).size() != want) {
      return InvalidArgument("chunk " + std::to_string(chunks[i]) + " payload has " +
                             std::to_string(message.payload(i).size()) + " bytes, expected " +
                             std::to_string(want));
    }
  }
  if (push.getKind() == wire::PushKind::INITIAL) {
    if (worker != 0) return InvalidArgument("only worker 0 sets initial values");
    if (push.getPullBack() != 0) return InvalidArgument("initial values take no pull-back");
    // Sent again after a failover at the start: only the chunks whose
    // primary was lost before its backup held them have none.
    const bool again = push.getAgain();
    for (uint32_t c : chunks) {
      if (store_->Initialized(c) && !again) {
        return FailedPrecondition("chunk " + std::to_string(c) + " already has initial values");
      }
    }
    std::vector<uint32_t> initialized;
    for (uint32_t i = 0; i < chunks.size(); ++i) {
      if (store_->Initialized(chunks[i])) continue;
      EEN_RETURN_IF_ERROR(store_->SetInitial(chunks[i], message.payload(i)));
      initialized.push_back(chunks[i]);
    }
    if (again && !initialized.empty()) {
      spdlog::info(
          "{} chunk(s) got their initial values again from worker 0 (their primary was "
          "lost before their backup held them)",
          initialized.size());
    }
    SendImages(initialized);
    NoteChunksReady();
    AnswerReadyPulls();
    return Status::Ok();
  }
  if (state) return TakeState(push, message);
  const uint64_t step = push.getStep();
  const double lr = push.getLr();  // < 0: the configured one
  if (!std::isfinite(lr))
    return InvalidArgument("learning rate " + std::to_string(lr) + " is not finite");
  std::vector<uint32_t> fresh;  // a resent push repeats chunks already counted: those are dropped
  for (uint32_t i = 0; i < chunks.size(); ++i) {
    const uint32_t c = chunks[i];
    if (!store_->Initialized(c))
      return FailedPrecondition("chunk " + std::to_string(c) + " has no initial values yet");
    EEN_ASSIGN_OR_RETURN(const bool repeat, store_->IsRepeat(c, worker, step));
    if (!repeat) fresh.push_back(i);
  }
  if (fresh.size() < chunks.size()) {
    spdlog::info("dropped {} repeated chunk(s) of a push from worker {} for step {}",
                 chunks.size() - fresh.size(), worker, step);
  }
  std::vector<uint32_t> completed;
  Status failed;  // the chunks completed before a failure are still applied
  for (uint32_t i : fresh) {
    Result<bool> done = store_->Contribute(chunks[i], worker, step, message.payload(i), type, lr);
    if (!done.ok()) {
      failed = done.status();
      break;
    }
    if (*done) completed.push_back(chunks[i]);
  }
  // Together: the apply threads share the message's chunks.
  const std::vector<uint32_t> applied = store_->ApplySteps(completed);
  if (failed.ok() && push.getPullBack() != 0) {
    // Answered as soon as these chunks reach step+1: the values stream back
    // bucket by bucket while the worker's later buckets are still arriving.
    PendingPull p{peer, push.getPullBack(), step + 1, store_->sum_mode(), type, {}, false};
    p.worker = worker;
    for (uint32_t c : chunks) p.chunks.push_back(c);
    failed = QueuePull(std::move(p));           // applied all the same
    if (completed.empty()) AnswerReadyPulls();  // a repeat: may be ready already
  }
  if (push.getKind() == wire::PushKind::GRADIENT && chunks.size() > 0) {
    recorder_.Record(EventKind::kPushReceived, step, received, Clock::now(),
                     static_cast<uint32_t>(worker), chunks[0], chunks.size());
  }
  AfterCompletion(applied);
  return failed;
}

Status ParameterServer::TakeState(wire::Push::Reader push, const Message& message) {
  if (push.getWorker() != 0) return InvalidArgument("only worker 0 loads a checkpoint");
  if (push.getPullBack() != 0) return InvalidArgument("a checkpoint's state takes no pull-back");
  const uint64_t step = push.getStep();
  if (step > kMaxCheckpointStep) {
    return InvalidArgument("a checkpoint of step " + std::to_string(step) + " is beyond belief");
  }
  auto chunks = push.getChunks();
  // Sent again after a PS was lost: chunks that took it already are skipped.
  auto taken_already = [&](uint32_t c) {
    return push.getAgain() && step > 0 && store_->Version(c) == step;
  };
  std::vector<uint32_t> loaded;
  for (uint32_t i = 0; i < chunks.size(); ++i) {
    const uint32_t c = chunks[i];
    if (!store_->Initialized(c)) {
      return FailedPrecondition("chunk " + std::to_string(c) + " has no initial values yet");
    }
    if (taken_already(c)) continue;
    bool contributed = false;
    for (int w = 0; w < store_->num_workers(); ++w) contributed |= store_->HasContribution(c, w);
    if (store_->Version(c) != 0 || contributed) {
      return FailedPrecondition("the job has trained already (chunk " + std::to_string(c) +
                                (contributed ? " has gradients of step " : " is at step ") +
                                std::to_string(store_->Version(c)) +
                                "): every worker loads the checkpoint, before its first step");
    }
  }
  for (uint32_t i = 0; i < chunks.size(); ++i) {
    const uint32_t c = chunks[i];
    if (taken_already(c)) continue;
    ChunkImage image{c, step, std::vector<float>(message.payload(i).size() / sizeof(float)), {}};
    std::memcpy(image.data.data(), message.payload(i).data(), message.payload(i).size());
    EEN_RETURN_IF_ERROR(store_->LoadImage(image));
    loaded.push_back(c);
  }
  if (!loaded.empty()) {
    spdlog::info("took a checkpoint's values and optimizer state for {} chunk(s): step {}",
                 loaded.size(), step);
  }
  SendImages(loaded);
  NoteChunksReady();
  AnswerReadyPulls();
  return Status::Ok();
}

void ParameterServer::AfterCompletion(const std::vector<uint32_t>& applied) {
  if (!applied.empty()) StepsCompleted(applied);
  if (store_->clipping()) AnswerReadyNorms();
}

Status ParameterServer::CheckClipMessage(const char* what, uint64_t epoch, int worker) const {
  if (!store_->clipping()) {
    return InvalidArgument(std::string(what) + ", but this job does not clip gradients");
  }
  if (epoch != epoch_) {
    return StaleEpoch(std::string(what) + " with shard map epoch " + std::to_string(epoch) +
                      ", current epoch is " + std::to_string(epoch_));
  }
  if (worker < 0 || worker >= store_->num_workers() || !store_->IsLive(worker)) {
    return InvalidArgument(std::string(what) + " from worker rank " + std::to_string(worker) +
                           ", which does not train in this job now");
  }
  return Status::Ok();
}

Status ParameterServer::HandleReduce(const transport::PeerId& peer, wire::Reduce::Reader reduce,
                                     const Message& message) {
  if (message.payload_count() != 1) {
    return InvalidArgument("a collective part carries one payload frame");
  }
  const Frame& data = message.payload(0);
  CollectiveContribution c{.group = reduce.getGroup(),
                           .seq = reduce.getSeq(),
                           .rank = reduce.getRank(),
                           .contributors = reduce.getContributors(),
                           .op = reduce.getOp(),
                           .dtype = reduce.getDtype(),
                           .offset = reduce.getOffset(),
                           .numel = reduce.getNumel(),
                           .total = reduce.getTotal(),
                           .root = reduce.getRoot(),
                           .members = {},
                           .from = peer,
                           .data = data.data(),
                           .bytes = data.size(),
                           .frame = data};
  if (reduce.getMembers().size() > 65536) return InvalidArgument("collective: too many members");
  for (int32_t m : reduce.getMembers()) c.members.push_back(m);
  EEN_ASSIGN_OR_RETURN(std::optional<CollectiveResult> done, collectives_.Add(c));
  if (done) AnswerCollective(*done);
  return Status::Ok();
}

void ParameterServer::AnswerCollective(const CollectiveResult& done) {
  // Every contributor gets the same bytes: one frame, shared by each reply.
  for (const transport::PeerId& to : done.to) {
    Message reply = ps_messages::ReduceReply(env_.rank, done.group, done.seq, done.offset,
                                             done.error, done.result, done.absent);
    if (Status s = listener_->Send(to, std::move(reply)); !s.ok()) {
      spdlog::warn("could not answer collective call {} of group {}: {}", done.seq, done.group,
                   s.ToString());
    }
  }
}

Status ParameterServer::HandleNormQuery(const transport::PeerId& peer,
                                        wire::NormQuery::Reader query) {
  EEN_RETURN_IF_ERROR(CheckClipMessage("norm query", query.getEpoch(), query.getWorker()));
  constexpr size_t kMaxPendingNorms = 4096;  // a few per worker are ever outstanding
  if (pending_norms_.size() >= kMaxPendingNorms) {
    return FailedPrecondition("too many norm queries outstanding");
  }
  pending_norms_.push_back({peer, query.getRequestId(), query.getStep()});
  AnswerReadyNorms();
  return Status::Ok();
}

void ParameterServer::AnswerReadyNorms() {
  for (auto it = pending_norms_.begin(); it != pending_norms_.end();) {
    const ChunkStore::NormShare share = store_->NormOf(it->step);
    if (share.state == ChunkStore::NormShare::State::kWaiting) {
      ++it;
      continue;
    }
    if (share.state == ChunkStore::NormShare::State::kGone) {
      SendError(it->peer, wire::ErrorCode::FAILED_PRECONDITION,
                "PS " + std::to_string(env_.rank) + ": the gradient norm of step " +
                    std::to_string(it->step) + " is no longer known here (chunks at step " +
                    std::to_string(store_->MinVersion()) + ")",
                it->request_id);
    } else {
      const bool applied = share.state == ChunkStore::NormShare::State::kApplied;
      Message reply = ps_messages::NormReply(env_.rank,
                                             {.request_id = it->request_id,
                                              .step = it->step,
                                              .applied = applied,
                                              .total_norm = share.total_norm},
                                             share.chunks, share.sum_squares);
      if (Status s = listener_->Send(it->peer, std::move(reply)); !s.ok()) {
        spdlog::warn("could not answer a norm query: {}", s.ToString());
      }
    }
    it = pending_norms_.erase(it);
  }
}

Status ParameterServer::HandleClipNorm(wire::ClipNorm::Reader clip) {
  EEN_RETURN_IF_ERROR(CheckClipMessage("clip norm", clip.getEpoch(), clip.getWorker()));
  const double norm = clip.getTotalNorm();
  if (!std::isfinite(norm) || norm < 0) {
    // Every worker computed it from the same shares: a NaN or inf gradient.
    return InvalidArgument("the total gradient norm of step " + std::to_string(clip.getStep()) +
                           " is " + std::to_string(norm) + " (a NaN or infinite gradient)");
  }
  // Every worker sends the same total; the first one applies the step.
  AfterCompletion(store_->ApplyClipped(clip.getStep(), norm));
  return Status::Ok();
}

Status ParameterServer::HandlePull(const transport::PeerId& peer, wire::Pull::Reader pull) {
  if (pull.getEpoch() != epoch_) {
    return StaleEpoch("pull with shard map epoch " + std::to_string(pull.getEpoch()) +
                      ", current epoch is " + std::to_string(epoch_));
  }
  // A new worker may pull before this PS has the membership that adds it
  // (the answer waits for that step anyway): any sane rank may pull.
  if (pull.getWorker() < 0 || pull.getWorker() > kMaxWorkers) {
    return InvalidArgument("pull from worker rank " + std::to_string(pull.getWorker()));
  }
  EEN_RETURN_IF_ERROR(CheckChunks(pull.getChunks()));
  if (pull.getParked()) {  // ssp: out of the staleness bound until its next gradient
    if (pull.getChunks().size() != 0) return InvalidArgument("a parked pull lists no chunks");
    store_->Park(pull.getWorker());
    AnswerReadyPulls();
    return Status::Ok();
  }
  if (pull.getGradients() && (!store_->sum_mode() || pull.getMinVersion() == 0)) {
    return InvalidArgument("gradients can be pulled only in sum mode, for a step that ran");
  }
  EEN_ASSIGN_OR_RETURN(const WireType type, wire::WireTypeOf(pull.getDtype(), "pull"));
  if (pull.getOptimizerState() &&
      (pull.getGradients() || store_->sum_mode() || type != WireType::kF32)) {
    return InvalidArgument(
        "a checkpoint pull asks for fp32 values and a server optimizer's state (not in sum "
        "mode, not with gradients)");
  }
  PendingPull p{peer,
                pull.getRequestId(),
                pull.getMinVersion(),
                pull.getGradients(),
                type,
                {},
                pull.getFrozenValues() || pull.getOptimizerState()};
  p.optimizer_state = pull.getOptimizerState();
  p.final_values = pull.getFinalValues();
  p.worker = pull.getWorker();
  for (uint32_t c : pull.getChunks()) {
    if (p.gradients && store_->Kind(c) == TensorKind::kFrozen && p.frozen_values) {
      return InvalidArgument("chunk " + std::to_string(c) + " is frozen: it has no gradient");
    }
    if (p.gradients && store_->Version(c) > p.min_version) {
      return FailedPrecondition("the mean gradient of step " + std::to_string(p.min_version - 1) +
                                " for chunk " + std::to_string(c) + " is gone (chunk at step " +
                                std::to_string(store_->Version(c)) + ")");
    }
    p.chunks.push_back(c);
  }
  if (pull.getAgain()) {  // the worker heard nothing for a while
    const bool waiting = std::any_of(pending_.begin(), pending_.end(), [&](const PendingPull& q) {
      return q.peer == peer && q.request_id == p.request_id;
    });
    if (waiting) return Status::Ok();  // it will be answered when ready, once
    spdlog::warn(
        "worker {} asked again for pull {}, which this PS does not hold (lost on the way, or "
        "answered and the answer lost): {}",
        p.worker, p.request_id, Ready(p) ? "answering it now" : "waiting with it now");
  }
  if (Ready(p)) {
    Answer(p);
    return Status::Ok();
  }
  return QueuePull(std::move(p));
}

void ParameterServer::DropPendingRequests() {
  pending_.clear();
  pending_pull_chunks_ = 0;
  pending_norms_.clear();
}

Status ParameterServer::QueuePull(PendingPull pull) {
  // Bounded: a worker has a few pulls outstanding per PS, each of at most
  // every chunk here once (CheckChunks).
  constexpr size_t kMaxPendingPulls = 1 << 16, kMaxPendingPullChunks = 1 << 22;
  if (pending_.size() >= kMaxPendingPulls ||
      pending_pull_chunks_ + pull.chunks.size() > kMaxPendingPullChunks) {
    return InvalidArgument("too many pulls wait here already (" + std::to_string(pending_.size()) +
                           "); refused");
  }
  pending_pull_chunks_ += pull.chunks.size();
  pending_.push_back(std::move(pull));
  return Status::Ok();
}

bool ParameterServer::Ready(const PendingPull& p) const {
  if (frozen_ && p.min_version > freeze_above_) return false;
  if (store_->consistency().per_arrival()) return ReadyPerArrival(p);
  for (uint32_t c : p.chunks) {
    if (!store_->Initialized(c) || store_->Version(c) < p.min_version) return false;
    // Replicated: served only once the backup has this version too.
    if (map_.BackupOfChunk(c) != ShardMap::kNoPs &&
        store_->Acked(c) < static_cast<int64_t>(p.min_version)) {
      return false;
    }
  }
  return true;
}

bool ParameterServer::ReadyPerArrival(const PendingPull& p) const {
  const Consistency& consistency = store_->consistency();
  for (uint32_t c : p.chunks) {
    if (!store_->Initialized(c)) return false;
    // The worker's own gradients are in, and confirmed by the backup.
    if (p.worker < store_->num_workers()) {
      if (store_->WorkerSteps(c, p.worker) < p.min_version) return false;
      if (map_.BackupOfChunk(c) != ShardMap::kNoPs &&
          store_->Acked(c) < static_cast<int64_t>(store_->AppliedAt(c, p.worker))) {
        return false;
      }
    }
    if (!p.final_values && !consistency.Allows(p.min_version, store_->SlowestSteps(c))) {
      return false;
    }
  }
  return true;
}

void ParameterServer::AnswerState(const PendingPull& p) {
  std::vector<uint64_t> versions;
  std::vector<transport::Frame> payload;
  versions.reserve(p.chunks.size());
  payload.reserve(p.chunks.size());
  for (const uint32_t c : p.chunks) {
    // A copy (later steps change the arena), lent to the frame, as SendImages does.
    auto image = std::make_shared<ChunkImage>(store_->CaptureChunk(c));
    versions.push_back(image->version);
    payload.push_back(
        transport::Frame::Borrow(image->data.data(), image->data.size() * sizeof(float), image));
  }
  const uint64_t version =
      versions.empty() ? 0 : *std::min_element(versions.begin(), versions.end());
  Message m = ps_messages::PullReply({.request_id = p.request_id,
                                      .dtype = wire::DTypeOf(WireType::kF32),
                                      .version = version,
                                      .membership_epoch = membership_epoch_,
                                      .membership_step = membership_step_,
                                      .membership_data_step = membership_data_step_,
                                      .live_workers = &live_workers_,
                                      .batch_shares = &batch_shares_,
                                      .unfinished = &membership_unfinished_,
                                      .slowest = version,
                                      .own_steps = version,
                                      .versions = &versions,
                                      .state_slots = static_cast<uint32_t>(store_->StateSlots())},
                                     p.chunks, std::move(payload));
  if (Status s = listener_->Send(p.peer, std::move(m)); !s.ok()) {
    spdlog::warn("could not answer a checkpoint pull: {}", s.ToString());
  }
}

void ParameterServer::Answer(const PendingPull& p) {
  if (p.optimizer_state) return AnswerState(p);
  const bool per_arrival = store_->consistency().per_arrival();
  uint64_t slowest = UINT64_MAX;
  uint64_t own = UINT64_MAX;
  uint64_t version = UINT64_MAX;
  const bool known_worker = p.worker >= 0 && p.worker < store_->num_workers();
  std::vector<transport::Frame> payload;
  payload.reserve(p.chunks.size());
  for (const uint32_t c : p.chunks) {
    version = std::min(version, store_->Version(c));
    if (per_arrival) slowest = std::min(slowest, store_->SlowestSteps(c));
    if (per_arrival && known_worker) own = std::min(own, store_->WorkerSteps(c, p.worker));
    if (store_->Kind(c) == TensorKind::kFrozen && !p.frozen_values) {
      payload.emplace_back();  // the version is there; the values never change
    } else {
      payload.push_back(p.gradients ? store_->WireMeanGradient(c, p.type)
                                    : store_->WireValues(c, p.type));
    }
  }
  // ssp/async: the version a worker asks for is its own step count.
  if (per_arrival) version = p.min_version;
  Message m = ps_messages::PullReply({.request_id = p.request_id,
                                      .dtype = wire::DTypeOf(p.type),
                                      .version = p.chunks.empty() ? 0 : version,
                                      .membership_epoch = membership_epoch_,
                                      .membership_step = membership_step_,
                                      .membership_data_step = membership_data_step_,
                                      .live_workers = &live_workers_,
                                      .batch_shares = &batch_shares_,
                                      .unfinished = &membership_unfinished_,
                                      // none holds it back: no staleness
                                      .slowest = std::min(slowest, version),
                                      .own_steps = own == UINT64_MAX ? version : own},
                                     p.chunks, std::move(payload));
  const size_t bytes = m.payload_bytes();
  if (Status s = listener_->Send(p.peer, std::move(m)); !s.ok()) {
    spdlog::warn("could not answer a pull: {}", s.ToString());
    return;
  }
  pulls_answered_.Add();
  pull_bytes_.Add(bytes);
  if (!p.chunks.empty() && version > 0 && version != UINT64_MAX && p.worker >= 0) {
    recorder_.Record(EventKind::kPullAnswered, version - 1, p.since, Clock::now(),
                     static_cast<uint32_t>(p.worker), p.chunks.front(), p.chunks.size());
  }
}

void ParameterServer::AnswerReadyPulls() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (Ready(*it)) {
      Answer(*it);
      pending_pull_chunks_ -= it->chunks.size();
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void ParameterServer::ExpirePulls() {
  const auto now = Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->since < env_.step_timeout) {
      ++it;
      continue;
    }
    std::string why;
    if (const auto stall = store_->OldestStall(); stall && !stall->missing.empty()) {
      std::string who;
      for (int w : stall->missing) who += (who.empty() ? "" : ", ") + std::to_string(w);
      why =
          fmt::format(": step {} still waits for the gradients of worker(s) {}", stall->step, who);
    }
    SendError(it->peer, wire::ErrorCode::FAILED_PRECONDITION,
              fmt::format(
                  "PS {}: the parameters of step {} were not ready within the step "
                  "timeout ({} s, een-launch --step-timeout){}",
                  env_.rank, it->min_version,
                  std::chrono::duration_cast<std::chrono::seconds>(env_.step_timeout).count(), why),
              it->request_id);
    pending_pull_chunks_ -= it->chunks.size();
    it = pending_.erase(it);
  }
}

}  // namespace een::ps
