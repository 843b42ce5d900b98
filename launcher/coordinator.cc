#include "launcher/coordinator.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "common/logging.h"
#include "common/optimizer_wire.h"
#include "common/wire.h"

#include <capnp/serialize.h>
#include <cstring>

namespace een {

using std::chrono::milliseconds;
using transport::Message;

namespace {

const char* RoleName(wire::Role r) {
  switch (r) {
    case wire::Role::PS: return "ps";
    case wire::Role::WORKER: return "worker";
    default: return "coordinator";
  }
}

long MillisSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {
  std::random_device random;
  incarnation_ = (uint64_t{random()} << 32 | random()) | 1;  // never 0
}

Coordinator::~Coordinator() = default;

Status Coordinator::Bind() {
  if (options_.job.ps < 1 || options_.job.workers < 1) {
    return InvalidArgument("a job needs at least one PS and one worker");
  }
  ps_.resize(options_.job.ps);
  workers_.resize(options_.job.workers);
  if (!options_.state_path.empty()) {
    EEN_ASSIGN_OR_RETURN(state_store_, StateStore::Open(options_.state_path));
    if (options_.restore) EEN_RETURN_IF_ERROR(RestoreState());
  }
  EEN_ASSIGN_OR_RETURN(transport::Device * device, transport::DeviceFor(options_.listen_address));
  EEN_ASSIGN_OR_RETURN(listener_, device->Listen(options_.listen_address));
  return Status::Ok();
}

void Coordinator::SaveState() {
  if (!state_store_) return;
  capnp::MallocMessageBuilder b;
  auto st = b.initRoot<wire::CoordinatorState>();
  st.setState(state_);
  auto tensors = st.initTensors(model_.size());
  for (size_t i = 0; i < model_.size(); ++i) {
    tensors[i].setName(model_[i].name);
    tensors[i].setNumel(model_[i].numel);
  }
  OptimizerToWire(optimizer_, st.initOptimizer());
  auto nodes = st.initNodes(ps_.size() + workers_.size());
  size_t i = 0;
  for (auto* all : {&ps_, &workers_}) {
    for (const Node& n : *all) {
      auto r = nodes[i++];
      r.setRole(all == &ps_ ? wire::Role::PS : wire::Role::WORKER);
      r.setRank(n.rank);
      r.setHost(n.host);
      r.setPid(n.pid);
      r.setDataAddress(n.data_address);
      r.setDone(n.done);
      r.setLost(n.lost);
      r.setStep(n.step);
      r.setJoining(n.joining);
      r.setJoinStep(n.join_step);
    }
  }
  st.setMembershipEpoch(membership_epoch_);
  const std::vector<int> live = membership_pending_ ? std::vector<int>() : LiveWorkerRanks();
  auto l = st.initLiveWorkers(live.size());
  for (size_t k = 0; k < live.size(); ++k) l.set(k, live[k]);
  st.setCompleteSnapshot(complete_snapshot_);
  st.setStartStep(start_step_);
  st.setResume(options_.resume);
  st.setMapEpoch(map_epoch_);
  if (map_) map_->ToWire(st.initMap());
  st.setRollbackEpoch(rollback_epoch_);
  st.setMapMoved(map_moved_);
  st.setWorkerReplacements(worker_replacements_);
  HistoryToWire(st.initHistory(history_.size()));
  auto words = capnp::messageToFlatArray(b);
  auto bytes = words.asBytes();
  if (Status s = state_store_->Put(std::string(bytes.begin(), bytes.end())); !s.ok()) {
    spdlog::error("{}; a restart of the coordinator now would lose the latest changes", s.message());
  }
}

Status Coordinator::RestoreState() {
  EEN_ASSIGN_OR_RETURN(std::optional<std::string> saved, state_store_->Get());
  if (!saved) {  // killed before the job started: nothing was lost
    spdlog::warn("no saved state in {}: the job had not started; starting over (every process "
                 "registers again)", options_.state_path);
    return Status::Ok();
  }
  // Copied into words: Cap'n Proto reads aligned memory.
  std::vector<capnp::word> words(saved->size() / sizeof(capnp::word));
  std::memcpy(words.data(), saved->data(), words.size() * sizeof(capnp::word));
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto st = reader.getRoot<wire::CoordinatorState>();
    if (st.getState() == wire::JobState::STARTING) {
      spdlog::warn("the saved job had not started; starting over (every process registers again)");
      return Status::Ok();
    }
    if (st.getState() != wire::JobState::RUNNING && st.getState() != wire::JobState::SHUTDOWN) {
      return FailedPrecondition("the saved job had ended; nothing to take up");
    }
    state_ = st.getState();
    for (auto t : st.getTensors()) model_.push_back({t.getName(), t.getNumel()});
    EEN_ASSIGN_OR_RETURN(optimizer_, OptimizerFromWire(st.getOptimizer()));
    for (auto r : st.getNodes()) {
      std::vector<Node>& nodes = NodesOf(r.getRole());
      if (r.getRank() < 0) return DataLoss("the saved state lists a negative rank");
      if (r.getRank() >= static_cast<int>(nodes.size())) nodes.resize(r.getRank() + 1);  // joined live
      Node& n = nodes[r.getRank()];
      n.role = r.getRole();
      n.rank = r.getRank();
      n.host = r.getHost();
      n.pid = r.getPid();
      n.data_address = r.getDataAddress();
      n.done = r.getDone();
      n.lost = r.getLost();
      n.step = r.getStep();
      n.joining = r.getJoining();
      n.join_step = r.getJoinStep();
      n.registered = true;
      n.last_seen = Clock::now();  // silence counts from now
    }
    membership_epoch_ = st.getMembershipEpoch();
    std::vector<int> live;
    for (int w : st.getLiveWorkers()) live.push_back(w);
    membership_restart_needed_ = live != LiveWorkerRanks();
    complete_snapshot_ = st.getCompleteSnapshot();
    start_step_ = st.getStartStep();
    map_epoch_ = std::max<uint64_t>(1, st.getMapEpoch());
    if (st.hasMap()) {
      EEN_ASSIGN_OR_RETURN(ShardMap map, ShardMap::FromWire(st.getMap()));
      map_ = std::move(map);
    }
    rollback_epoch_ = st.getRollbackEpoch();
    map_moved_ = st.getMapMoved();
    worker_replacements_ = st.getWorkerReplacements();
    for (auto m : st.getHistory()) {
      MembershipEntry r{m.getEpoch(), m.getEffectiveStep(), {}};
      for (int w : m.getLiveWorkers()) r.live.push_back(w);
      history_.push_back(std::move(r));
    }
  } catch (const kj::Exception& e) {
    return DataLoss("the saved coordinator state is corrupt: " + std::string(e.getDescription().cStr()));
  }
  if (state_ == wire::JobState::SHUTDOWN) shutdown_at_ = Clock::now();
  spdlog::info("took the job up again from {} (incarnation {:x}): {} workers live, newest "
               "complete snapshot at step {}", options_.state_path, incarnation_,
               LiveWorkerRanks().size(), complete_snapshot_);
  return Status::Ok();
}

std::string Coordinator::Describe(const Node& n) const {
  return fmt::format("{} {} (host {}, pid {})", RoleName(n.role), n.rank, n.host, n.pid);
}

Coordinator::Node* Coordinator::NodeByControl(const transport::PeerId& peer) {
  for (auto* nodes : {&ps_, &workers_}) {
    for (Node& n : *nodes) {
      if (n.registered && n.control == peer) return &n;
    }
  }
  return nullptr;
}

Status Coordinator::Run(const std::atomic<bool>& stop) {
  if (state_ == wire::JobState::STARTING) {
    spdlog::info("listening on {} (pid {}); waiting for {} PS and {} workers", address(), getpid(),
                 options_.job.ps, options_.job.workers);
  } else {
    spdlog::info("listening on {} (pid {}) again", address(), getpid());
  }
  while (true) {
    if (stop) return Aborted("coordinator stopped by signal");
    auto envelope = listener_->Receive(milliseconds(20));
    if (envelope.ok()) Handle(*envelope);
    if (state_ == wire::JobState::STARTING && MillisSince(created_) > options_.job.startup_timeout.count()) {
      std::string missing;
      for (auto* nodes : {&ps_, &workers_}) {
        for (size_t r = 0; r < nodes->size(); ++r) {
          if (!(*nodes)[r].registered) {
            missing += fmt::format("{}{} {}", missing.empty() ? "" : ", ",
                                   nodes == &ps_ ? "ps" : "worker", r);
          }
        }
      }
      Abort(fmt::format("job did not start within {} ms: still missing {}",
                        options_.job.startup_timeout.count(), missing));
    }
    if (membership_restart_needed_ && !membership_pending_) {
      bool reachable = true;
      for (const Node& p : ps_) reachable &= p.lost || !p.control.empty();
      if (reachable) {
        membership_restart_needed_ = false;
        StartMembershipChange();  // the change under way when the old coordinator died
      }
    }
    if (recovering_ && MillisSince(recovery_started_) > options_.job.startup_timeout.count()) {
      Abort(fmt::format("no replacement for the lost PS registered within {} ms; ending the job "
                        "(its snapshots stay in place for --resume)",
                        options_.job.startup_timeout.count()));
    }
    if (state_ == wire::JobState::RUNNING) {
      CheckLiveness();
      if (MillisSince(last_progress_) >= options_.job.progress_interval.count()) ReportProgress();
    }
    if (state_ == wire::JobState::ABORTED || state_ == wire::JobState::SHUTDOWN) ReleaseSpares();
    if (state_ == wire::JobState::ABORTED &&
        MillisSince(aborted_at_) > 3 * options_.job.heartbeat_interval.count()) {
      return Aborted(abort_reason_);  // lingered so others heard the verdict
    }
    if (state_ == wire::JobState::SHUTDOWN) {
      bool all_left = true;
      for (const Node& n : ps_) all_left &= n.done || n.lost;
      if (all_left) {
        spdlog::info("job finished: every worker done, every PS left");
        return Status::Ok();
      }
      if (MillisSince(shutdown_at_) > 4 * options_.job.failover_threshold.count()) {
        spdlog::warn("job finished, but not every PS confirmed leaving; ending anyway");
        return Status::Ok();
      }
    }
  }
}

void Coordinator::NoteControlRoute(const transport::PeerId& peer, wire::Header::Reader h) {
  if (!h.hasSender() || h.isHeartbeat() || h.isRegister()) return;
  const wire::Role role = h.getSender().getRole();
  const int rank = h.getSender().getRank();
  if (role != wire::Role::PS && role != wire::Role::WORKER) return;
  std::vector<Node>& nodes = NodesOf(role);
  if (rank < 0 || rank >= static_cast<int>(nodes.size()) || !nodes[rank].registered) return;
  nodes[rank].control = peer;
}

void Coordinator::Handle(const transport::Envelope& envelope) {
  Status s = wire::Visit(envelope.message, [&](wire::Header::Reader h) -> Status {
    NoteControlRoute(envelope.from, h);
    switch (h.which()) {
      case wire::Header::HELLO: return Status::Ok();
      case wire::Header::ROLLED_BACK: return HandleRolledBack(envelope.from, h.getRolledBack());
      case wire::Header::MAP_REQUEST: {
        Node* n = NodeByControl(envelope.from);
        if (!n || n->role != wire::Role::WORKER) return InvalidArgument("map request from a non-worker");
        if (recovering_) {
          map_requests_.push_back(envelope.from);  // answered once every PS is back
          return Status::Ok();
        }
        return SendJobStart(*n);
      }
      case wire::Header::REGISTER: return HandleRegister(envelope.from, h.getRegister());
      case wire::Header::DRAIN: return HandleDrain(envelope.from, h.getDrain());
      case wire::Header::HEARTBEAT: return HandleHeartbeat(envelope.from, h.getHeartbeat());
      case wire::Header::BARRIER: return HandleBarrier(envelope.from, h.getBarrier().getSequence());
      case wire::Header::DONE: return HandleDone(envelope.from);
      case wire::Header::LEAVE: HandleLeave(envelope.from); return Status::Ok();
      case wire::Header::MEMBERSHIP_PREPARED:
        return HandleMembershipPrepared(envelope.from, h.getMembershipPrepared());
      default: return InvalidArgument("the coordinator does not take this message kind");
    }
  });
  if (!s.ok()) {
    spdlog::warn("refused a message: {}", s.ToString());
    (void)listener_->Send(envelope.from, wire::MakeError(wire::ErrorCode::INVALID_ARGUMENT,
                                                         "coordinator: " + s.message()));
  }
}

Status Coordinator::HandleRegister(const transport::PeerId& peer, wire::Register::Reader reg) {
  const wire::Role role = reg.getRole();
  if (state_ == wire::JobState::RUNNING && role == wire::Role::WORKER) {
    return AcceptReplacementWorker(peer, reg);
  }
  if (role == wire::Role::PS && reg.getSpare()) {
    PsProcess spare{peer, reg.getHost(), reg.getPid(), reg.getDataAddress()};
    for (PsProcess& known : spares_) {
      if (known.pid == spare.pid) {
        known = spare;  // registering again: we may have restarted
        return Status::Ok();
      }
    }
    if (spare.data_address.empty()) return InvalidArgument("a spare PS must give its data address");
    spares_.push_back(spare);
    spdlog::info("spare PS registered (host {}, pid {}): it takes over the next lost PS",
                 spare.host, spare.pid);
    return Status::Ok();
  }
  if (state_ == wire::JobState::RUNNING && role == wire::Role::PS &&
      reg.getRank() == static_cast<int>(ps_.size())) {
    return AddPs({peer, reg.getHost(), reg.getPid(), reg.getDataAddress()});  // capacity grows
  }
  if (state_ == wire::JobState::RUNNING && role == wire::Role::PS && reg.getRank() >= 0 &&
      reg.getRank() < static_cast<int>(ps_.size()) && ps_[reg.getRank()].pid == reg.getPid() &&
      !ps_[reg.getRank()].lost) {
    ps_[reg.getRank()].control = peer;  // asking again: its JobStart crossed our restart
    return SendJobStart(ps_[reg.getRank()]);
  }
  if (state_ == wire::JobState::RUNNING && role == wire::Role::PS && reg.getRank() >= 0 &&
      reg.getRank() < static_cast<int>(ps_.size()) &&
      (options_.job.replicas >= 2 || options_.job.snapshot_every > 0)) {
    // A replacement for a PS: the old one is gone (or about to be declared so).
    return ReplacePs(reg.getRank(), {peer, reg.getHost(), reg.getPid(), reg.getDataAddress()},
                     Describe(ps_[reg.getRank()]) + " was replaced by a new process");
  }
  if (state_ != wire::JobState::STARTING) {
    return FailedPrecondition("the job has already started (or ended); only a replacement for "
                              "a lost process of the running job can join it");
  }
  if (role != wire::Role::PS && role != wire::Role::WORKER) return InvalidArgument("bad role");
  std::vector<Node>& nodes = NodesOf(role);
  int rank = reg.getRank();
  if (rank < 0) {  // any free rank
    for (size_t r = 0; r < nodes.size() && rank < 0; ++r) {
      if (!nodes[r].registered) rank = static_cast<int>(r);
    }
  }
  if (rank < 0 || rank >= static_cast<int>(nodes.size())) {
    return InvalidArgument(fmt::format("{} rank {} is out of range (job has {})", RoleName(role),
                                       reg.getRank(), nodes.size()));
  }
  if (nodes[rank].registered && nodes[rank].pid == reg.getPid() &&
      nodes[rank].host == reg.getHost().cStr()) {
    nodes[rank].control = peer;  // the same process asking again: nothing changes
    return Status::Ok();
  }
  if (nodes[rank].registered) {
    return FailedPrecondition(fmt::format("{} rank {} is already registered by {}", RoleName(role),
                                          rank, Describe(nodes[rank])));
  }
  Node n;
  n.role = role;
  n.rank = rank;
  n.host = reg.getHost();
  n.pid = reg.getPid();
  n.control = peer;
  n.registered = true;
  if (role == wire::Role::PS) {
    n.data_address = reg.getDataAddress();
    if (n.data_address.empty()) return InvalidArgument("a PS must give its data address");
    for (uint64_t step : reg.getSnapshotSteps()) n.snapshot_steps.push_back(step);
  } else {
    std::vector<TensorInfo> model;
    for (auto t : reg.getTensors()) model.push_back({t.getName(), t.getNumel()});
    if (model.empty()) return InvalidArgument("worker registered no parameters");
    EEN_ASSIGN_OR_RETURN(OptimizerConfig opt, OptimizerFromWire(reg.getOptimizer()));
    if (model_.empty()) {
      model_ = model;
      optimizer_ = opt;
    } else if (Status same = CheckSameModel(rank, model); !same.ok()) {
      // Workers must train one model: the job cannot start at all.
      RefuseJob(same.message() + "; every worker must build the same model");
      return same;
    }
    if (rank == 0) optimizer_ = opt;  // rank 0's settings define the job
  }
  nodes[rank] = n;
  spdlog::info("registered {}", Describe(n));
  for (auto* all : {&ps_, &workers_}) {
    for (const Node& x : *all) {
      if (!x.registered) return Status::Ok();
    }
  }
  return StartJob();
}

Status Coordinator::CheckSameModel(int rank, const std::vector<TensorInfo>& model) {
  if (model.size() != model_.size()) {
    return InvalidArgument(fmt::format("worker {} has {} parameter tensors, others have {}", rank,
                                       model.size(), model_.size()));
  }
  for (size_t i = 0; i < model.size(); ++i) {
    if (model[i].name != model_[i].name || model[i].numel != model_[i].numel) {
      return InvalidArgument(fmt::format(
          "worker {}'s tensor {} is '{}' with {} elements, other workers have '{}' with {}", rank,
          i, model[i].name, model[i].numel, model_[i].name, model_[i].numel));
    }
  }
  return Status::Ok();
}

Status Coordinator::AcceptReplacementWorker(const transport::PeerId& peer,
                                            wire::Register::Reader reg) {
  const int rank = reg.getRank();
  if (rank < 0 || rank > static_cast<int>(workers_.size())) {
    return InvalidArgument(fmt::format("worker rank {} is out of range (job has {}; a new worker "
                                       "takes rank {})", rank, workers_.size(), workers_.size()));
  }
  std::vector<TensorInfo> model;
  for (auto t : reg.getTensors()) model.push_back({t.getName(), t.getNumel()});
  EEN_RETURN_IF_ERROR(CheckSameModel(rank, model));
  const bool grows = rank == static_cast<int>(workers_.size());
  if (grows) {  // a new worker: the job grows
    workers_.emplace_back();
    workers_.back().role = wire::Role::WORKER;
    workers_.back().rank = rank;
    workers_.back().registered = true;
    workers_.back().lost = true;  // nothing to declare lost: it just joins
  }
  Node& w = workers_[rank];
  if (w.done) return FailedPrecondition(fmt::format("worker {} has finished already", rank));
  if (w.pid == reg.getPid() && !w.lost && !w.joining) {
    // A worker asking again: its JobStart crossed our restart.
    w.control = peer;
    return SendJobStart(w, false, w.join_step);
  }
  if (w.pid == reg.getPid() && !w.lost) {  // a joiner asking again: we restarted meanwhile
    w.control = peer;
    w.joining = true;
    if (membership_pending_ || membership_restart_needed_) return Status::Ok();  // at the commit
    const auto& last = history_.empty() ? std::vector<int>() : history_.back().live;
    if (std::find(last.begin(), last.end(), rank) != last.end()) {
      w.joining = false;  // agreed already
      return SendJobStart(w, false, history_.back().effective_step);
    }
    StartMembershipChange();
    return Status::Ok();
  }
  if (!w.lost) {
    WorkerLost(w, Describe(w) + " was replaced by a new process");
    if (state_ != wire::JobState::RUNNING) return FailedPrecondition(abort_reason_);
  }
  w.host = reg.getHost();
  w.pid = reg.getPid();
  w.control = peer;
  w.lost = false;
  w.joining = true;
  if (!grows) worker_replacements_++;
  w.last_seen = Clock::now();
  spdlog::info("{} joins the running job{}: it trains from the step every PS agrees on",
               Describe(w), grows ? fmt::format(" as a new worker ({} in all)", workers_.size()) : "");
  if (!membership_pending_) StartMembershipChange();  // else: right after the pending one
  SaveState();
  return Status::Ok();
}

Result<ShardMap> Coordinator::CurrentMap() const {
  std::vector<std::string> addresses;
  for (const Node& p : ps_) addresses.push_back(p.data_address);
  if (map_) return map_->WithAddresses(addresses, map_epoch_);
  ShardingOptions sharding = options_.job.sharding;
  sharding.replicas = static_cast<uint32_t>(options_.job.replicas);
  return ShardMap::Build(model_, options_.job.ps, sharding, addresses, map_epoch_);
}

std::vector<bool> Coordinator::UsablePs() const {
  std::vector<bool> usable;
  for (const Node& p : ps_) usable.push_back(p.registered && !p.lost && !p.done);
  return usable;
}

size_t Coordinator::LivePsCount() const {
  size_t n = 0;
  for (const Node& p : ps_) n += p.lost ? 0 : 1;
  return n;
}

void Coordinator::SendMapChange() {
  for (const Node& p : ps_) {
    if (p.lost) continue;
    capnp::MallocMessageBuilder b;
    map_->ToWire(b.initRoot<wire::Header>().initMapChange());
    if (Status s = listener_->Send(p.control, Message{{wire::Encode(b)}}); !s.ok()) {
      spdlog::warn("could not send the new shard map to ps {}: {}", p.rank, s.ToString());
    }
  }
}

bool Coordinator::FailOver(Node& lost, const std::string& why) {
  std::vector<bool> usable = UsablePs();
  usable[lost.rank] = false;
  for (uint32_t s = 0; s < map_->num_shards(); ++s) {
    const uint32_t backup = map_->BackupOfShard(s);
    if (map_->OwnerOfShard(s) != static_cast<uint32_t>(lost.rank) || backup == ShardMap::kNoPs) continue;
    if (ps_[backup].chunks_ready != map_epoch_) {
      spdlog::warn("{}; no failover: ps {} is still building its backups of shard map epoch {}",
                   why, backup, map_epoch_);
      return false;
    }
  }
  auto next = map_->AfterLoss(lost.rank, usable, map_epoch_ + 1);
  if (!next.ok()) {
    spdlog::warn("{}; no failover: {}", why, next.status().message());
    return false;
  }
  std::set<uint32_t> heirs;
  size_t shards = 0, rebuilt = 0;  // shards that hold chunks
  uint64_t bytes = 0;
  std::vector<uint64_t> shard_bytes(map_->num_shards(), 0);
  for (const Chunk& c : map_->chunks()) shard_bytes[c.shard] += c.numel * uint64_t{4};
  for (uint32_t s = 0; s < map_->num_shards(); ++s) {
    if (map_->OwnerOfShard(s) == static_cast<uint32_t>(lost.rank) && shard_bytes[s] > 0) {
      ++shards;
      bytes += shard_bytes[s];
      heirs.insert(next->OwnerOfShard(s));
    }
    if (shard_bytes[s] > 0 && next->BackupOfShard(s) != map_->BackupOfShard(s) &&
        next->BackupOfShard(s) != ShardMap::kNoPs) {
      ++rebuilt;
    }
  }
  std::string to;
  for (uint32_t h : heirs) to += fmt::format("{}ps {}", to.empty() ? "" : ", ", h);
  lost.lost = true;
  map_epoch_++;
  map_ = std::move(next).value();
  map_moved_ = true;
  spdlog::warn("{}; failing over: its {} shard(s) ({} bytes) are served by their backups on {} "
               "from now, shard map epoch {}; {} new backup(s) being built{}",
               why, shards, bytes, to.empty() ? "no PS" : to, map_epoch_, rebuilt,
               LivePsCount() < 2 && spares_.empty()
                   ? " (one PS left: no copies until a replacement joins)" : "");
  SendMapChange();
  SaveState();
  UseSpare(lost.rank);
  return true;
}

Status Coordinator::ReplacePs(int rank, const PsProcess& process, const std::string& why) {
  Node& old = ps_[rank];
  if (!old.lost) {  // not declared lost yet: it is now
    const bool failed_over = options_.job.replicas >= 2 && !recovering_ && FailOver(old, why);
    if (!failed_over && options_.job.snapshot_every > 0) BeginRecovery(old, why);
    if (!failed_over && options_.job.snapshot_every == 0) {
      Abort(why + ", and its shards have no live backup; ending the job");
    }
    if (state_ != wire::JobState::RUNNING) return FailedPrecondition(abort_reason_);
  }
  old.host = process.host;
  old.pid = process.pid;
  old.data_address = process.data_address;
  old.control = process.control;
  old.lost = false;
  old.done = false;
  old.last_seen = Clock::now();
  if (recovering_) {  // rolling back: it loads the lost PS's snapshot
    spdlog::info("{} takes over its shards from the snapshot of step {}", Describe(old),
                 rollback_step_);
    EEN_RETURN_IF_ERROR(SendJobStart(old));
    ps_ready_.insert(old.rank);
    MaybeEndRecovery();
    SaveState();
    return Status::Ok();
  }
  // Failed over already: it joins as the holder of new backups.
  map_epoch_++;
  map_ = map_->WithPs(old.rank, old.data_address, UsablePs(), map_epoch_);
  size_t backups = 0;
  for (uint32_t c = 0; c < map_->chunks().size(); ++c) {
    backups += map_->BackupOfChunk(c) == static_cast<uint32_t>(old.rank) ? 1 : 0;
  }
  spdlog::info("{} joins the running job: it backs up {} chunk(s), built from their primaries; "
               "shard map epoch {}", Describe(old), backups, map_epoch_);
  EEN_RETURN_IF_ERROR(SendJobStart(old, /*rebuild=*/true));
  SendMapChange();
  SaveState();
  return Status::Ok();
}

std::string Coordinator::PsList(const std::set<uint32_t>& ranks) const {
  std::string text;
  for (uint32_t r : ranks) text += fmt::format("{}ps {}", text.empty() ? "" : ", ", r);
  return text.empty() ? "no PS" : text;
}

Status Coordinator::AddPs(const PsProcess& process) {
  if (moves_ || recovering_ || !map_) {
    return Unavailable("shards are moving or rolling back already; start the PS again later");
  }
  Node n;
  n.role = wire::Role::PS;
  n.rank = static_cast<int>(ps_.size());
  n.host = process.host;
  n.pid = process.pid;
  n.data_address = process.data_address;
  n.control = process.control;
  n.registered = true;
  n.last_seen = Clock::now();
  if (n.data_address.empty()) return InvalidArgument("a PS must give its data address");
  ps_.push_back(n);
  map_ = map_->WithNewPs(n.data_address, map_epoch_);
  spdlog::info("{} joins the running job: the job grows to {} PS", Describe(ps_.back()), ps_.size());
  StartMoves(map_->MovesOnto(n.rank, UsablePs()), -1,
             fmt::format("balancing onto the new ps {}", n.rank));
  EEN_RETURN_IF_ERROR(SendJobStart(ps_.back(), /*rebuild=*/true));
  return Status::Ok();
}

Status Coordinator::HandleDrain(const transport::PeerId& peer, int rank) {
  auto refuse = [&](const std::string& why) {
    (void)listener_->Send(peer, wire::MakeError(wire::ErrorCode::FAILED_PRECONDITION,
                                                "cannot drain ps " + std::to_string(rank) + ": " + why));
    return Status::Ok();
  };
  if (state_ != wire::JobState::RUNNING || !map_) return refuse("the job is not running");
  if (rank < 0 || rank >= static_cast<int>(ps_.size())) return refuse("no such PS");
  if (ps_[rank].lost || ps_[rank].done) return refuse("it is lost or gone already");
  if (moves_ || recovering_) return refuse("shards are moving or rolling back already; try later");
  std::vector<bool> usable = UsablePs();
  usable[rank] = false;
  if (std::find(usable.begin(), usable.end(), true) == usable.end()) {
    return refuse("it is the only PS left");
  }
  ShardMap::Moves moves = map_->MovesOff(rank, usable);
  std::set<uint32_t> to;
  for (const auto& [shard, target] : moves) to.insert(target);
  capnp::MallocMessageBuilder b;
  b.initRoot<wire::Header>().setDrainReply(
      fmt::format("draining ps {}: {} shard(s) move to {}; it leaves once they are served there",
                  rank, moves.size(), PsList(to)));
  EEN_RETURN_IF_ERROR(listener_->Send(peer, Message{{wire::Encode(b)}}));
  StartMoves(std::move(moves), rank, fmt::format("draining ps {}", rank));
  return Status::Ok();
}

void Coordinator::StartMoves(ShardMap::Moves moves, int leaving, const std::string& what) {
  uint64_t bytes = 0;
  std::set<uint32_t> to;
  for (const auto& [shard, target] : moves) {
    bytes += map_->ShardBytes(shard);
    to.insert(target);
  }
  map_epoch_++;
  map_ = map_->Staged(moves, map_epoch_);
  map_moved_ = true;
  moves_ = ShardMoves{std::move(moves), leaving, map_epoch_, bytes};
  spdlog::info("{}: {} shard(s), {} bytes of parameters, move to {}; first they are backed up "
               "there (shard map epoch {})",
               what, moves_->moves.size(), bytes, PsList(to), map_epoch_);
  SendMapChange();
  SaveState();
  MaybeFinishMoves();  // nothing to copy: done at once
}

void Coordinator::MaybeFinishMoves() {
  if (!moves_) return;
  if (map_epoch_ != moves_->staged_epoch) {  // a failover or rollback came first
    spdlog::warn("shard moves abandoned: the shard map changed meanwhile (epoch {})", map_epoch_);
    moves_.reset();
    return;
  }
  std::set<uint32_t> to;
  for (const auto& [shard, target] : moves_->moves) {
    if (ps_[target].chunks_ready != moves_->staged_epoch) return;  // still receiving
    to.insert(target);
  }
  map_epoch_++;
  map_ = map_->Moved(moves_->moves, options_.job.replicas, moves_->leaving, UsablePs(), map_epoch_);
  spdlog::info("shard moves done: {} shard(s) ({} bytes of parameters) now served by {} (shard "
               "map epoch {})",
               moves_->moves.size(), moves_->bytes, PsList(to), map_epoch_);
  if (moves_->leaving >= 0) {
    Node& gone = ps_[moves_->leaving];
    gone.drained = true;
    gone.done = true;
    spdlog::info("{} is drained and leaves", Describe(gone));
  }
  moves_.reset();
  SendMapChange();
  SaveState();
}

void Coordinator::UseSpare(int rank) {
  if (spares_.empty() || state_ != wire::JobState::RUNNING || !ps_[rank].lost) return;
  const PsProcess spare = spares_.front();
  spares_.erase(spares_.begin());
  spdlog::info("spare PS (host {}, pid {}) takes over as ps {}", spare.host, spare.pid, rank);
  if (Status s = ReplacePs(rank, spare, ""); !s.ok()) {
    spdlog::warn("the spare could not take over ps {}: {}", rank, s.ToString());
  }
}

void Coordinator::ReleaseSpares() {
  for (const PsProcess& spare : spares_) {
    capnp::MallocMessageBuilder b;
    auto reply = b.initRoot<wire::Header>().initHeartbeatReply();
    reply.setIncarnation(incarnation_);
    reply.setState(state_);
    reply.setReason(abort_reason_);
    (void)listener_->Send(spare.control, Message{{wire::Encode(b)}});
  }
  spares_.clear();
}

void Coordinator::SaveHistory() {
  if (options_.snapshot_dir.empty()) return;
  if (Status s = WriteMembershipLog(options_.snapshot_dir, history_); !s.ok()) {
    spdlog::warn("{}; a --resume of this job may misplace the data position", s.message());
  }
}

void Coordinator::HistoryToWire(capnp::List<wire::Membership>::Builder list) const {
  for (size_t k = 0; k < history_.size(); ++k) {
    list[k].setEpoch(history_[k].epoch);
    list[k].setEffectiveStep(history_[k].effective_step);
    auto live = list[k].initLiveWorkers(history_[k].live.size());
    for (size_t j = 0; j < history_[k].live.size(); ++j) live.set(j, history_[k].live[j]);
  }
}

Status Coordinator::SendJobStart(const Node& n, bool rebuild, uint64_t join_step) {
  EEN_ASSIGN_OR_RETURN(ShardMap map, CurrentMap());
  capnp::MallocMessageBuilder b;
  auto js = b.initRoot<wire::Header>().initJobStart();
  js.setRank(n.rank);
  js.setWorldSize(static_cast<int>(workers_.size()));  // grows as workers join
  js.setNumPs(static_cast<int>(ps_.size()));
  map.ToWire(js.initMap());
  OptimizerToWire(optimizer_, js.initOptimizer());
  const bool rolled_back = rollback_epoch_ > 0;
  js.setResume(!rebuild && (options_.resume || rolled_back));
  js.setStartStep(rolled_back ? rollback_step_ : start_step_);
  js.setRollbackEpoch(rollback_epoch_);
  js.setRebuild(rebuild);
  if (join_step > 0) {
    js.setResume(true);  // parameters come from the PS, not from this worker
    js.setStartStep(join_step);
  }
  HistoryToWire(js.initHistory(history_.size()));
  return listener_->Send(n.control, Message{{wire::Encode(b)}});
}

void Coordinator::BeginRecovery(Node& lost, const std::string& why) {
  if (optimizer_.kind == OptimizerConfig::Kind::kSum) {
    Abort(why + "; a sum-mode job cannot roll back (its model lives in the workers), so it ends");
    return;
  }
  uint64_t job_step = 0;
  for (const Node& w : workers_) job_step = std::max(job_step, w.step);
  if (complete_snapshot_ == 0) {
    Abort(why + "; no snapshot is complete yet to roll back to, so the job ends (snapshots "
                "every " + std::to_string(options_.job.snapshot_every) + " steps)");
    return;
  }
  if (map_moved_) {
    Abort(why + "; a failover already moved shards, so the snapshots (taken with the first "
                "shard map) cannot be rolled back to; the job ends (resume it with --resume)");
    return;
  }
  lost.lost = true;
  recovering_ = true;
  recovery_started_ = Clock::now();
  rollback_step_ = complete_snapshot_;
  map_epoch_++;
  rollback_epoch_ = map_epoch_;
  ps_ready_.clear();
  spdlog::warn("{}; rolling back to the snapshot of step {}: steps {}-{} are redone; shard map "
               "epoch {}; waiting for a replacement of ps {}",
               why, rollback_step_, rollback_step_ + 1, std::max(job_step, rollback_step_ + 1),
               map_epoch_, lost.rank);
  for (const Node& p : ps_) {
    if (p.lost) continue;
    capnp::MallocMessageBuilder b;
    auto rb = b.initRoot<wire::Header>().initRollback();
    rb.setEpoch(map_epoch_);
    rb.setStep(rollback_step_);
    if (Status s = listener_->Send(p.control, Message{{wire::Encode(b)}}); !s.ok()) {
      spdlog::warn("could not reach ps {} for the rollback: {}", p.rank, s.ToString());
    }
  }
  SaveState();
  UseSpare(lost.rank);
}

Status Coordinator::HandleRolledBack(const transport::PeerId& peer, wire::Rollback::Reader done) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::PS) return InvalidArgument("rollback answer from a non-PS");
  if (!recovering_ || done.getEpoch() != map_epoch_) return Status::Ok();
  ps_ready_.insert(n->rank);
  MaybeEndRecovery();
  return Status::Ok();
}

void Coordinator::MaybeEndRecovery() {
  if (!recovering_ || ps_ready_.size() < ps_.size()) return;
  recovering_ = false;
  spdlog::info("every PS is back at step {} (shard map epoch {}); training resumes",
               rollback_step_, map_epoch_);
  for (const transport::PeerId& peer : map_requests_) {
    if (Node* w = NodeByControl(peer)) (void)SendJobStart(*w);
  }
  map_requests_.clear();
}

Result<uint64_t> Coordinator::PickResumeStep() {
  std::vector<uint64_t> common = ps_[0].snapshot_steps;
  for (const Node& p : ps_) {
    std::vector<uint64_t> both;
    for (uint64_t step : common) {
      if (std::find(p.snapshot_steps.begin(), p.snapshot_steps.end(), step) != p.snapshot_steps.end()) {
        both.push_back(step);
      }
    }
    common = both;
  }
  if (common.empty()) {
    return FailedPrecondition("cannot resume: no snapshot is complete and intact on every one of "
                              "the " + std::to_string(ps_.size()) + " PS (see their log lines); "
                              "start without --resume to train from scratch");
  }
  const uint64_t step = *std::max_element(common.begin(), common.end());
  uint64_t newest = step;
  for (const Node& p : ps_) {
    for (uint64_t s : p.snapshot_steps) newest = std::max(newest, s);
  }
  if (newest > step) {
    spdlog::warn("the snapshot of step {} is not intact on every PS; using step {}", newest, step);
  }
  return step;
}

void Coordinator::NoteSnapshots() {
  uint64_t complete = UINT64_MAX;
  for (const Node& p : ps_) {
    if (!p.lost) complete = std::min(complete, p.snapshot_step);
  }
  if (complete > complete_snapshot_ && complete != UINT64_MAX) {
    complete_snapshot_ = complete;
    spdlog::info("snapshot of step {} complete on all {} PS", complete, ps_.size());
    SaveState();
  }
}

Status Coordinator::StartJob() {
  if (options_.resume && optimizer_.kind == OptimizerConfig::Kind::kSum) {
    const std::string reason = "cannot resume a sum-mode job: its model and optimizer live in "
                               "the workers, which snapshots do not hold";
    RefuseJob(reason);
    return FailedPrecondition(reason);
  }
  if (options_.resume) {
    auto step = PickResumeStep();
    if (!step.ok()) {
      RefuseJob(step.status().message());
      return step.status();
    }
    start_step_ = *step;
    spdlog::info("resuming from the snapshot of step {}", start_step_);
  }
  EEN_ASSIGN_OR_RETURN(ShardMap map, CurrentMap());
  map_ = map;
  std::string balance;
  for (uint64_t b : map.BytesPerPs()) balance += (balance.empty() ? "" : " / ") + std::to_string(b);
  spdlog::info("job starts: {} tensors, {} parameters in {} chunks; bytes per PS {}; optimizer "
               "{}; {} cop{} of each shard",
               model_.size(), map.TotalNumel(), map.chunks().size(), balance,
               OptimizerName(optimizer_.kind), map.replicated() ? 2 : 1,
               map.replicated() ? "ies" : "y");
  if (options_.resume && !options_.snapshot_dir.empty()) {
    // Where the data stood: the changes before the snapshot's step, then everyone again.
    auto saved = ReadMembershipLog(options_.snapshot_dir);
    if (saved.ok()) {
      for (MembershipEntry& e : *saved) {
        if (e.effective_step <= start_step_) history_.push_back(std::move(e));
      }
      membership_epoch_ = history_.empty() ? 0 : history_.back().epoch + 1;
    } else {
      spdlog::warn("{}: workers start as if every one had trained every step", saved.status().message());
    }
  }
  history_.push_back({membership_epoch_, start_step_, LiveWorkerRanks()});  // the start: everyone
  SaveHistory();
  for (auto* nodes : {&ps_, &workers_}) {
    for (Node& n : *nodes) {
      EEN_RETURN_IF_ERROR(SendJobStart(n));
      n.last_seen = Clock::now();
    }
  }
  state_ = wire::JobState::RUNNING;
  last_progress_ = Clock::now();
  SaveState();
  return Status::Ok();
}

Status Coordinator::HandleHeartbeat(const transport::PeerId& peer, wire::Heartbeat::Reader hb) {
  const wire::Role role = hb.getRole();
  if (role != wire::Role::PS && role != wire::Role::WORKER) return InvalidArgument("bad role");
  std::vector<Node>& nodes = NodesOf(role);
  const int rank = hb.getRank();
  if (rank < 0 || rank >= static_cast<int>(nodes.size()) || !nodes[rank].registered) {
    return InvalidArgument(fmt::format("heartbeat from unknown {} {}", RoleName(role), rank));
  }
  Node& n = nodes[rank];
  wire::JobState state = state_;
  std::string reason = abort_reason_;
  if (hb.getPid() != 0 && n.pid != 0 && hb.getPid() != n.pid) {
    // A process that was replaced (back from a partition, say): it must stop.
    state = wire::JobState::ABORTED;
    reason = fmt::format("this process (pid {}) was replaced by pid {} after it was lost",
                         hb.getPid(), n.pid);
  } else {
    n.last_seen = Clock::now();
    n.step = hb.getStep();
    n.loss = hb.getLoss();
    n.samples = hb.getSamples();
    n.sync_micros = hb.getSyncMicros();
    if (role == wire::Role::PS && hb.getChunksReady() != n.chunks_ready) {
      n.chunks_ready = hb.getChunksReady();
      if (n.chunks_ready == map_epoch_ && map_epoch_ > 1 && map_ && map_->replicated()) {
        spdlog::info("ps {} holds every chunk of shard map epoch {} (its backups are built)",
                     n.rank, map_epoch_);
      }
      MaybeFinishMoves();
    }
    if (n.drained) {
      state = wire::JobState::SHUTDOWN;
      reason = "drained: its shards moved to other PS";
    }
    if (role == wire::Role::PS && hb.getSnapshotStep() > n.snapshot_step) {
      n.snapshot_step = hb.getSnapshotStep();
      NoteSnapshots();
    }
    if (n.lost) {
      state = wire::JobState::ABORTED;
      reason = fmt::format("this {} was declared lost (silent longer than the failover "
                           "threshold); the job went on without it", RoleName(role));
    }
  }
  capnp::MallocMessageBuilder b;
  auto reply = b.initRoot<wire::Header>().initHeartbeatReply();
  reply.setIncarnation(incarnation_);
  reply.setMapEpoch(map_epoch_);
  reply.setState(state);
  reply.setReason(reason);
  return listener_->Send(peer, Message{{wire::Encode(b)}});
}

Status Coordinator::HandleBarrier(const transport::PeerId& peer, uint64_t sequence) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::WORKER) return InvalidArgument("barrier from a non-worker");
  barriers_[sequence].insert(n->rank);
  ReleaseBarriers();
  return Status::Ok();
}

void Coordinator::ReleaseBarriers() {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    bool all = true;
    for (const Node& w : workers_) {
      if (!w.done && !w.lost && !w.joining && !it->second.count(w.rank)) all = false;
    }
    if (!all) {
      ++it;
      continue;
    }
    for (int rank : it->second) {
      if (workers_[rank].lost) continue;
      capnp::MallocMessageBuilder b;
      b.initRoot<wire::Header>().initBarrierReply().setSequence(it->first);
      (void)listener_->Send(workers_[rank].control, Message{{wire::Encode(b)}});
    }
    it = barriers_.erase(it);
  }
}

Status Coordinator::HandleDone(const transport::PeerId& peer) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::WORKER) return InvalidArgument("done from a non-worker");
  n->done = true;
  spdlog::info("worker {} finished at step {}", n->rank, n->step);
  ReleaseBarriers();
  capnp::MallocMessageBuilder b;
  b.initRoot<wire::Header>().setDoneReply();
  EEN_RETURN_IF_ERROR(listener_->Send(peer, Message{{wire::Encode(b)}}));
  MaybeFinish();
  SaveState();
  return Status::Ok();
}

void Coordinator::MaybeFinish() {
  for (const Node& w : workers_) {
    if (!w.done && !w.lost) return;
  }
  if (state_ == wire::JobState::RUNNING) {
    state_ = wire::JobState::SHUTDOWN;
    shutdown_at_ = Clock::now();
    ReportProgress();
  }
}

void Coordinator::HandleLeave(const transport::PeerId& peer) {
  if (Node* n = NodeByControl(peer); n && n->role == wire::Role::PS) {
    n->done = true;
    spdlog::info("ps {} left", n->rank);
    SaveState();
  }
}

void Coordinator::CheckLiveness() {
  uint64_t job_step = 0;
  for (const Node& w : workers_) job_step = std::max(job_step, w.step);
  for (Node& p : ps_) {
    const long silent = MillisSince(p.last_seen);
    if (!p.done && !p.lost && silent > options_.job.failover_threshold.count()) {
      const std::string why = fmt::format("{} silent for {} ms > failover threshold {} ms, last at "
                                          "step {}", Describe(p), silent,
                                          options_.job.failover_threshold.count(), p.step);
      if (options_.job.replicas >= 2 && !recovering_ && FailOver(p, why)) return;
      if (options_.job.snapshot_every > 0) {
        BeginRecovery(p, why);
        return;
      }
      Abort(fmt::format("{} silent for {} ms > failover threshold {} ms, last at step {} "
                        "(job at step {}); ending the job (with --snapshot-every N the job "
                        "rolls back to its last snapshot instead)",
                        Describe(p), silent, options_.job.failover_threshold.count(), p.step,
                        job_step));
      return;
    }
  }
  for (Node& w : workers_) {
    const long silent = MillisSince(w.last_seen);
    if (!w.done && !w.lost && !w.joining && silent > options_.job.failover_threshold.count()) {
      WorkerLost(w, fmt::format("{} silent for {} ms > failover threshold {} ms, last at step {}",
                                Describe(w), silent, options_.job.failover_threshold.count(),
                                w.step));
      if (state_ != wire::JobState::RUNNING) return;
    }
  }
}

std::vector<int> Coordinator::LiveWorkerRanks() const {
  std::vector<int> live;
  for (const Node& w : workers_) {
    if (!w.lost) live.push_back(w.rank);
  }
  return live;
}

void Coordinator::WorkerLost(Node& w, const std::string& what) {
  w.lost = true;
  const std::vector<int> live = LiveWorkerRanks();
  const int restarts_left = options_.job.max_restarts - worker_replacements_;
  if (static_cast<int>(live.size()) < options_.job.MinWorkers() && restarts_left <= 0) {
    Abort(fmt::format("{}; only {} worker(s) left, fewer than the {} the job needs "
                      "(--min-workers); ending the job",
                      what, live.size(), options_.job.MinWorkers()));
    return;
  }
  spdlog::warn("{}; the job goes on with {} workers (--min-workers {}{})", what, live.size(),
               options_.job.MinWorkers(),
               restarts_left > 0 ? fmt::format(", {} replacement(s) left", restarts_left) : "");
  ReleaseBarriers();
  if (!membership_pending_) StartMembershipChange();
  MaybeFinish();
  SaveState();
}

void Coordinator::StartMembershipChange() {
  membership_epoch_++;
  membership_pending_ = true;
  membership_live_ = LiveWorkerRanks();
  prepared_.clear();
  for (const Node& p : ps_) {
    if (p.lost) continue;
    capnp::MallocMessageBuilder b;
    auto prepare = b.initRoot<wire::Header>().initMembershipPrepare();
    prepare.setEpoch(membership_epoch_);
    auto live = prepare.initLiveWorkers(membership_live_.size());
    for (size_t i = 0; i < membership_live_.size(); ++i) live.set(i, membership_live_[i]);
    if (Status s = listener_->Send(p.control, Message{{wire::Encode(b)}}); !s.ok()) {
      spdlog::warn("could not reach ps {} about the new membership: {}", p.rank, s.ToString());
    }
  }
}

Status Coordinator::HandleMembershipPrepared(const transport::PeerId& peer,
                                             wire::MembershipPrepared::Reader prepared) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::PS) return InvalidArgument("membership answer from a non-PS");
  if (!membership_pending_ || prepared.getEpoch() != membership_epoch_) return Status::Ok();
  prepared_[n->rank] = prepared.getMaxVersion();
  if (prepared_.size() < LivePsCount()) return Status::Ok();
  uint64_t step = 0;
  for (const auto& [rank, version] : prepared_) step = std::max(step, version + 1);
  std::string ranks;
  for (int r : membership_live_) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  spdlog::info("membership {}: from step {} the {} live workers ({}) share the rest of each "
               "epoch's data (re-sharded: a lost worker's share included, a joiner takes part)",
               membership_epoch_, step, membership_live_.size(), ranks);
  for (const Node& p : ps_) {
    if (p.lost) continue;
    capnp::MallocMessageBuilder b;
    auto commit = b.initRoot<wire::Header>().initMembershipCommit();
    commit.setEpoch(membership_epoch_);
    commit.setEffectiveStep(step);
    auto live = commit.initLiveWorkers(membership_live_.size());
    for (size_t i = 0; i < membership_live_.size(); ++i) live.set(i, membership_live_[i]);
    EEN_RETURN_IF_ERROR(listener_->Send(p.control, Message{{wire::Encode(b)}}));
  }
  membership_pending_ = false;
  history_.push_back({membership_epoch_, step, membership_live_});
  SaveHistory();
  for (int r : membership_live_) {
    Node& w = workers_[r];
    if (!w.joining) continue;
    w.joining = false;
    w.join_step = step;
    w.last_seen = Clock::now();
    spdlog::info("worker {} takes part from step {}", r, step);
    EEN_RETURN_IF_ERROR(SendJobStart(w, false, step));
  }
  SaveState();
  if (LiveWorkerRanks() != membership_live_) StartMembershipChange();  // changed meanwhile
  return Status::Ok();
}

void Coordinator::RefuseJob(const std::string& reason) {
  for (auto* nodes : {&ps_, &workers_}) {
    for (const Node& n : *nodes) {
      if (!n.registered) continue;
      (void)listener_->Send(n.control, wire::MakeError(wire::ErrorCode::FAILED_PRECONDITION,
                                                       "the job cannot start: " + reason));
    }
  }
  Abort(reason);
}

void Coordinator::Abort(const std::string& reason) {
  if (state_ == wire::JobState::ABORTED) return;
  spdlog::error("{}", reason);
  state_ = wire::JobState::ABORTED;
  abort_reason_ = reason;
  aborted_at_ = Clock::now();
}

void Coordinator::ReportProgress() {
  const double seconds = MillisSince(last_progress_) / 1000.0;
  uint64_t samples = 0;
  for (const Node& w : workers_) samples += w.samples;
  const Node& lead = workers_[0];
  const double rate = seconds > 0 ? (samples - last_progress_samples_) / seconds : 0;
  spdlog::info("progress: step {} | loss {:.4f} | {:.0f} samples/s | sync {:.2f} ms", lead.step,
               lead.loss, rate, lead.sync_micros / 1000.0);
  last_progress_ = Clock::now();
  last_progress_samples_ = samples;
}

}  // namespace een
