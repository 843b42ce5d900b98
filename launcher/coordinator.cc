#include "launcher/coordinator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <random>

#include "common/error_codes.h"
#include "common/input_file.h"
#include "common/logging.h"
#include "common/optimizer_wire.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "launcher/coordinator_internal.h"
#include "launcher/coordinator_messages.h"
#include "launcher/model_check.h"
#include "launcher/process_sighting.h"

namespace een {

using std::chrono::milliseconds;
using transport::Message;

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {
  if (auto c = Consistency::Parse(options_.job.consistency); c.ok()) consistency_ = *c;
  std::random_device random;
  incarnation_ = (uint64_t{random()} << 32 | random()) | 1;  // never 0
}

Coordinator::~Coordinator() = default;

Status Coordinator::Bind() {
  if (options_.job.ps < 0 || options_.job.workers < 1) {
    return InvalidArgument("a job needs at least one worker");
  }
  ps_.resize(options_.job.ps);
  workers_.resize(options_.job.workers);
  if (WithoutPs() && !options_.restore) {
    // Nothing registers: the job runs from the start, and ends when every
    // worker has exited with status 0 (or at the first that failed).
    state_ = wire::JobState::RUNNING;
    last_progress_ = Clock::now();
  }
  if (!options_.state_path.empty()) {
    EEN_ASSIGN_OR_RETURN(state_store_, StateStore::Open(options_.state_path));
    if (options_.restore) EEN_RETURN_IF_ERROR(RestoreState());
  }
  EEN_ASSIGN_OR_RETURN(transport::Device * device, transport::DeviceFor(options_.listen_address));
  EEN_ASSIGN_OR_RETURN(listener_, device->Listen(options_.listen_address));
  if (options_.job.metrics_port >= 0) {
    std::string token;
    if (!options_.job.metrics_token_file.empty()) {
      EEN_ASSIGN_OR_RETURN(
          token, ReadInputFile(options_.job.metrics_token_file, "the metrics token file", 4096));
      while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
        token.pop_back();
      }
      if (token.empty()) {
        return InvalidArgument("the metrics token file " + options_.job.metrics_token_file +
                               " is empty");
      }
    }
    const std::string& host = options_.job.metrics_host;
    EEN_ASSIGN_OR_RETURN(metrics_server_,
                         MetricsServer::Start(host, options_.job.metrics_port, token));
    spdlog::info("metrics of the whole job at http://{}:{}/metrics{}",
                 host.find(':') != std::string::npos ? "[" + host + "]" : host,
                 metrics_server_->port(), token.empty() ? "" : " (a bearer token is required)");
  }
  return Status::Ok();
}

Coordinator::Process Coordinator::ProcessOf(const transport::PeerId& peer,
                                            wire::Register::Reader reg) {
  return {peer, reg.getHost(), reg.getPid(), reg.getDataAddress(), reg.getLocalAddress()};
}

void Coordinator::Node::Take(const Process& process, Clock::time_point now) {
  host = process.host;
  pid = process.pid;
  data_address = process.data_address;
  local_address = process.local_address;
  control = process.control;
  metrics.clear();  // a replacement starts its own counts
  compute_micros = 0;
  in_program_micros = 0;
  silence_cpu.reset();
  slow = false;
  replication_lag = 0;
  wait.reset();
  rates.Reset();
  probes.clear();
  liveness.Restart(now);
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
  if (WithoutPs() && !options_.restore) {
    spdlog::info(
        "listening on {} (pid {}); the job has {} workers and no parameter servers (--ps 0): "
        "the program moves its own gradients (gloo, nccl), een-launch supervises it",
        address(), getpid(), options_.job.workers);
  } else if (state_ == wire::JobState::STARTING) {
    spdlog::info("listening on {} (pid {}); waiting for {} PS and {} workers", address(), getpid(),
                 options_.job.ps, options_.job.workers);
  } else {
    spdlog::info("listening on {} (pid {}) again", address(), getpid());
  }
  constexpr milliseconds kTurn(20);  // the longest one turn of the loop waits for a message
  last_turn_ = Clock::now();
  while (true) {
    if (stop) return Aborted("coordinator stopped by signal");
    // A turn that took much longer than it waits (a slow disk under
    // SaveState, the scheduler): nobody was heard meanwhile, not their fault.
    const auto turn_at = Clock::now();
    const auto stall = turn_at - last_turn_ - 5 * kTurn;
    last_turn_ = turn_at;
    if (stall > Clock::duration::zero()) {
      for (auto* nodes : {&ps_, &workers_}) {
        for (Node& n : *nodes) n.liveness.Forgive(stall);
      }
    }
    auto envelope = listener_->Receive(kTurn);
    if (envelope.ok()) Handle(*envelope);
    if (state_ == wire::JobState::STARTING) ForgetSilentNodesBeforeStart();
    if (state_ == wire::JobState::STARTING &&
        MillisSince(created_) > options_.job.startup_timeout.count()) {
      CheckStartupTimeout();
    }
    if (membership_.interrupted() && !membership_.pending()) {
      bool reachable = true;
      for (const Node& p : ps_) reachable &= p.lost || !p.control.empty();
      if (reachable) StartMembershipChange();  // the change under way when the old one died
    }
    if (rollback_.TimedOut(Clock::now(), options_.job.startup_timeout)) {
      Abort(
          fmt::format("no replacement for the lost PS registered within {} ms; ending the job "
                      "(its snapshots stay in place for --resume)",
                      options_.job.startup_timeout.count()));
    }
    if (finished_change_at_ && Clock::now() >= *finished_change_at_) GoOnWithoutFinished();
    MaybePublishMetrics();
    MaybeAnswerTraces();
    MaybeAnswerProbes();
    if (state_ == wire::JobState::RUNNING && !WithoutPs()) {
      CheckLiveness();
      if (MillisSince(last_progress_) >= options_.job.progress_interval.count()) ReportProgress();
    }
    if (state_ == wire::JobState::ABORTED || state_ == wire::JobState::SHUTDOWN) ReleaseSpares();
    if (state_ == wire::JobState::ABORTED &&
        MillisSince(aborted_at_) > 3 * options_.job.heartbeat_interval.count() &&
        (LaunchersTold() ||
         MillisSince(aborted_at_) > 2 * options_.job.failover_threshold.count())) {
      return Aborted(abort_reason_);  // lingered so others heard the verdict
    }
    if (state_ == wire::JobState::SHUTDOWN) {
      bool all_left = true;
      for (const Node& n : ps_) all_left &= n.done || n.lost;
      // A worker waiting for the final values hears that it has them
      // (a heartbeat answered "finished") before the coordinator goes,
      // however long a busy machine delays its heartbeat; unless it went
      // silent (exited, or its host is gone).
      const bool workers_told = AwaitingWorkersTold();
      all_left &= workers_told;
      // Per-node launch: each node's een-launch hears that the job
      // finished before the coordinator goes (else it finds it silent).
      // Once it may go, it lingers a few heartbeat intervals: the answers
      // just sent (a worker told that it holds the final values) leave
      // through the transport's I/O thread, which a busy machine may not
      // have run yet; they are lost if the process ends first.
      const bool may_go =
          (all_left && (LaunchersTold() ||
                        MillisSince(shutdown_at_) > 2 * options_.job.failover_threshold.count())) ||
          (workers_told && MillisSince(shutdown_at_) > 4 * options_.job.failover_threshold.count());
      if (may_go && !leaving_at_) leaving_at_ = Clock::now();
      if (may_go && MillisSince(*leaving_at_) > 3 * options_.job.heartbeat_interval.count()) {
        if (all_left) {
          spdlog::info("job finished: every worker done, every PS left");
        } else {
          spdlog::warn("job finished, but not every PS confirmed leaving; ending anyway");
        }
        return Status::Ok();
      }
    }
  }
}

void Coordinator::CheckStartupTimeout() {
  MaybeRefuseMismatchedModels();  // the better verdict, if models disagree
  if (state_ != wire::JobState::STARTING) return;
  std::string missing;  // "ps 1 and worker 0, 2 and 3"
  for (auto* nodes : {&ps_, &workers_}) {
    std::vector<std::string> ranks;
    for (size_t r = 0; r < nodes->size(); ++r) {
      if (!(*nodes)[r].registered) ranks.push_back(std::to_string(r));
    }
    if (ranks.empty()) continue;
    std::string list = ranks.back();
    if (ranks.size() > 1) {
      ranks.pop_back();
      list = fmt::format("{} and {}", fmt::join(ranks, ", "), list);
    }
    missing += fmt::format("{}{} {}", missing.empty() ? "" : " and ",
                           nodes == &ps_ ? "ps" : "worker", list);
  }
  // Per-node launch: why a node's een-launch was turned away, if one was.
  std::string refused;
  for (const auto& [node, why] : refused_launchers_) refused += fmt::format("; {}", why);
  RefuseJob(fmt::format("job did not start within {} ms (--startup-timeout): {} never registered{}",
                        options_.job.startup_timeout.count(), missing, refused));
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

Status Coordinator::CheckIdentity(const std::string& authenticated, ControlMessage::From from,
                                  wire::Header::Reader h) {
  if (authenticated.empty()) return Status::Ok();
  auto node = [](wire::Role role, int rank) {
    return role == wire::Role::WORKER ? transport::WorkerIdentity(rank)
           : role == wire::Role::PS   ? transport::PsIdentity(rank)
                                      : std::string("?");
  };
  // A spare authenticated before it had a rank: it may speak for a PS.
  auto speaks_for = [&](const std::string& claimed) {
    return claimed == authenticated ||
           (authenticated == "ps:spare" && claimed.rfind("ps:", 0) == 0);
  };
  std::vector<std::string> claims;
  if (h.hasSender() && (h.getSender().getRole() == wire::Role::WORKER ||
                        h.getSender().getRole() == wire::Role::PS)) {
    claims.push_back(node(h.getSender().getRole(), h.getSender().getRank()));
  }
  if (h.isRegister() && !h.getRegister().getSpare()) {
    claims.push_back(node(h.getRegister().getRole(), h.getRegister().getRank()));
  }
  if (h.isRegister() && h.getRegister().getSpare()) claims.push_back("ps:spare");
  if (h.isHeartbeat())
    claims.push_back(node(h.getHeartbeat().getRole(), h.getHeartbeat().getRank()));
  for (const std::string& claimed : claims) {
    if (!speaks_for(claimed)) {
      return InvalidArgument("this connection authenticated as '" + authenticated +
                             "' and cannot speak for '" + claimed + "'");
    }
  }
  if (from == ControlMessage::From::kOperator && authenticated != "eenctl" &&
      authenticated != "launcher") {
    return InvalidArgument("only eenctl may ask for this ('" + authenticated + "' asked)");
  }
  if (from == ControlMessage::From::kLauncher && authenticated != "launcher") {
    return InvalidArgument("only een-launch reports process exits ('" + authenticated + "' did)");
  }
  return Status::Ok();
}

const Coordinator::ControlMessage* Coordinator::ControlMessageOf(wire::Header::Which kind) {
  using C = Coordinator&;
  using E = const transport::Envelope&;
  using H = wire::Header::Reader;
  using From = ControlMessage::From;
  // A plain array (trivially destructible): threads still handling
  // messages while the process exits never meet a destroyed table.
  struct Row {
    wire::Header::Which kind;
    ControlMessage message;
  };
  static const Row kTable[] = {
      // A greeting after our restart: its route is noted, nothing else.
      {wire::Header::HELLO, {From::kAnyone, [](C, E, H) { return Status::Ok(); }}},
      {wire::Header::REGISTER,
       {From::kAnyone, [](C c, E e, H h) { return c.HandleRegister(e.from, h.getRegister()); }}},
      {wire::Header::HEARTBEAT,
       {From::kAnyone, [](C c, E e, H h) { return c.HandleHeartbeat(e.from, h.getHeartbeat()); }}},
      {wire::Header::MAP_REQUEST,
       {From::kAnyone, [](C c, E e, H) { return c.HandleMapRequest(e.from); }}},
      {wire::Header::BARRIER,
       {From::kAnyone,
        [](C c, E e, H h) {
          return c.HandleBarrier(e.from, h.getBarrier().getSequence(),
                                 h.getBarrier().getMapEpoch());
        }}},
      {wire::Header::BATCH_CLAIM,
       {From::kAnyone,
        [](C c, E e, H h) {
          return c.HandleBatchClaim(e.from, h.getBatchClaim().getSequence(),
                                    h.getBatchClaim().getStep(), h.getBatchClaim().getNotBefore());
        }}},
      {wire::Header::DONE,
       {From::kAnyone, [](C c, E e, H h) { return c.HandleDone(e.from, h.getDone()); }}},
      {wire::Header::AWAIT_FINAL,
       {From::kAnyone,
        [](C c, E e, H h) { return c.HandleDone(e.from, h.getAwaitFinal(), true); }}},
      {wire::Header::FINAL_TAKEN,
       {From::kAnyone, [](C c, E e, H) { return c.HandleFinalTaken(e.from); }}},
      {wire::Header::PS_FAULT,
       {From::kAnyone,
        [](C c, E e, H h) { return c.HandlePsFault(e.from, h.getPsFault().cStr()); }}},
      {wire::Header::LEAVE,
       {From::kAnyone,
        [](C c, E e, H) {
          c.HandleLeave(e.from);
          return Status::Ok();
        }}},
      {wire::Header::MEMBERSHIP_PREPARED,
       {From::kAnyone,
        [](C c, E e, H h) {
          return c.HandleMembershipPrepared(e.from, h.getMembershipPrepared());
        }}},
      {wire::Header::ROLLED_BACK,
       {From::kAnyone,
        [](C c, E e, H h) { return c.HandleRolledBack(e.from, h.getRolledBack()); }}},
      {wire::Header::DRAIN,
       {From::kOperator, [](C c, E e, H h) { return c.HandleDrain(e.from, h.getDrain()); }}},
      {wire::Header::SNAPSHOT_REQUEST,
       {From::kOperator, [](C c, E e, H) { return c.HandleSnapshotRequest(e.from); }}},
      {wire::Header::METRICS_REQUEST,
       {From::kOperator, [](C c, E e, H) { return c.HandleMetricsRequest(e.from); }}},
      {wire::Header::STATUS_REQUEST,
       {From::kOperator, [](C c, E e, H) { return c.HandleStatusRequest(e.from); }}},
      {wire::Header::PROBE_REQUEST,
       {From::kOperator, [](C c, E e, H) { return c.HandleProbeRequest(e.from); }}},
      {wire::Header::TRACE_REQUEST,
       {From::kOperator,
        [](C c, E e, H h) { return c.HandleTraceRequest(e.from, h.getTraceRequest()); }}},
      {wire::Header::WORKER_EXITED,
       {From::kLauncher, [](C c, E, H h) { return c.HandleWorkerExited(h.getWorkerExited()); }}},
      // A PS that cannot take up the job (a snapshot it refuses) says why.
      {wire::Header::ERROR,
       {From::kAnyone, [](C c, E e, H h) { return c.HandlePsCannotStart(e.from, h.getError()); }}},
      {wire::Header::PROCESS_GONE,
       {From::kLauncher,
        [](C c, E e, H h) { return c.HandleProcessGone(e.from, h.getProcessGone()); }}},
      {wire::Header::NODE_STATUS,
       {From::kLauncher,
        [](C c, E e, H h) { return c.HandleNodeStatus(e.from, h.getNodeStatus()); }}},
  };
  for (const Row& row : kTable) {
    if (row.kind == kind) return &row.message;
  }
  return nullptr;
}

void Coordinator::Handle(const transport::Envelope& envelope) {
  Status s = wire::Visit(envelope.message, [&](wire::Header::Reader h) -> Status {
    const ControlMessage* kind = ControlMessageOf(h.which());
    if (!kind) return InvalidArgument("the coordinator does not take this message kind");
    EEN_RETURN_IF_ERROR(CheckIdentity(envelope.authenticated, kind->from, h));
    NoteControlRoute(envelope.from, h);
    return kind->handle(*this, envelope, h);
  });
  if (!s.ok()) {
    counters_.refused_messages++;
    WarnCounted(KindOf(s.message()), "refused a message: " + s.ToString());
    // The sender reads it as "coordinator: ...", with the code it was found with.
    if (Status sent =
            listener_->Send(envelope.from, wire::MakeError(WireCodeOf(s.code()), s.message()));
        !sent.ok()) {
      spdlog::debug("could not tell the sender: {}", sent.ToString());
    }
  }
}

Status Coordinator::HandleRegister(const transport::PeerId& peer, wire::Register::Reader reg) {
  const wire::Role role = reg.getRole();
  if (WithoutPs()) {
    return FailedPrecondition(kWithoutPsRefusal);
  }
  if (state_ == wire::JobState::RUNNING && role == wire::Role::WORKER) {
    return AcceptReplacementWorker(peer, reg);
  }
  if (role == wire::Role::PS && reg.getSpare()) {
    Process spare = ProcessOf(peer, reg);
    for (Process& known : spares_) {
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
      reg.getRank() >= static_cast<int>(ps_.size()) && reg.getRank() < next_late_ps_) {
    // A late node's PS (elastic): added one after the other, each once the
    // shards moved to the one before; until its turn it is not answered
    // (it registers again every second).
    bool joining = membership_.pending() || membership_.interrupted();
    for (const Node& w : workers_) joining = joining || w.joining;
    if (reg.getRank() != static_cast<int>(ps_.size()) || moves_.active() || rollback_.active() ||
        joining) {
      return Status::Ok();
    }
    return AddPs(ProcessOf(peer, reg));
  }
  if (state_ == wire::JobState::RUNNING && role == wire::Role::PS &&
      reg.getRank() == static_cast<int>(ps_.size())) {
    return AddPs(ProcessOf(peer, reg));  // capacity grows
  }
  if (state_ == wire::JobState::RUNNING && role == wire::Role::PS && reg.getRank() >= 0 &&
      reg.getRank() < static_cast<int>(ps_.size()) && ps_[reg.getRank()].pid == reg.getPid() &&
      !ps_[reg.getRank()].lost) {
    ps_[reg.getRank()].control = peer;  // asking again: its JobStart crossed our restart
    EEN_RETURN_IF_ERROR(SendJobStart(ps_[reg.getRank()]));
    PsChanged();  // a pending round's prepare may have been lost with the JobStart
    return Status::Ok();
  }
  if (state_ == wire::JobState::RUNNING && role == wire::Role::PS && reg.getRank() >= 0 &&
      reg.getRank() < static_cast<int>(ps_.size()) &&
      (options_.job.replicas >= 2 || options_.job.snapshot_every > 0)) {
    // A replacement for a PS, once the old one is declared lost.
    const Node& held = ps_[reg.getRank()];
    if (!held.lost && !held.done) return ClaimOfLiveRank(held, reg.getPid());
    claims_.erase(reg.getPid());
    return ReplacePs(reg.getRank(), ProcessOf(peer, reg),
                     Describe(held) + " was replaced by a new process");
  }
  if (state_ == wire::JobState::ABORTED) return FailedPrecondition("job aborted: " + abort_reason_);
  if (state_ != wire::JobState::STARTING) {
    return FailedPrecondition(
        "the job has already started (or ended); only a replacement for "
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
  if (nodes[rank].registered) return ClaimOfLiveRank(nodes[rank], reg.getPid());
  claims_.erase(reg.getPid());
  Node n;
  n.role = role;
  n.rank = rank;
  n.Take(ProcessOf(peer, reg), Clock::now());
  n.registered = true;
  if (role == wire::Role::PS) {
    if (n.data_address.empty()) return InvalidArgument("a PS must give its data address");
    for (uint64_t step : reg.getSnapshotSteps()) n.snapshot_steps.push_back(step);
    n.snapshot_problem = reg.getSnapshotProblem().cStr();
    n.snapshot_folder_empty = reg.getSnapshotFolderEmpty();
    for (uint64_t step : reg.getEarlierSnapshots()) n.earlier_snapshots.push_back(step);
  } else {
    EEN_ASSIGN_OR_RETURN(std::vector<TensorInfo> model, TensorsFromWire(reg.getTensors()));
    if (model.empty()) return InvalidArgument("worker registered no parameters");
    EEN_ASSIGN_OR_RETURN(OptimizerConfig opt, OptimizerFromWire(reg.getOptimizer()));
    offered_models_[rank] = {peer, model};
    if (model_.empty()) {
      model_ = model;
      optimizer_ = opt;
    } else if (!CheckSameModel(rank, model).ok()) {
      // Workers must train one model: the job cannot start. Not registered
      // (it asks again each second); the verdict comes once every worker
      // has said what it builds, naming who disagrees with whom.
      MaybeRefuseMismatchedModels();
      return Status::Ok();
    }
    if (rank == 0) optimizer_ = opt;  // rank 0's settings define the job
  }
  nodes[rank] = n;
  spdlog::info("registered {}", Describe(n));
  if (role == wire::Role::WORKER) {
    RecordJoined(n);
    MaybeRefuseMismatchedModels();  // this one agrees, but one before it may not
    if (state_ != wire::JobState::STARTING) return Status::Ok();
  }
  for (auto* all : {&ps_, &workers_}) {
    for (const Node& x : *all) {
      if (!x.registered) return Status::Ok();
    }
  }
  return StartJob();
}

Status Coordinator::CheckSameModel(int rank, const std::vector<TensorInfo>& model) {
  const std::string mismatch =
      DescribeModelMismatch({{"the running job", model_}, {fmt::format("worker {}", rank), model}});
  return mismatch.empty() ? Status::Ok() : InvalidArgument(mismatch);
}

void Coordinator::MaybeRefuseMismatchedModels() {
  std::map<std::string, std::vector<TensorInfo>> models;
  for (const auto& [rank, offer] : offered_models_) {
    models[fmt::format("worker {}", rank)] = offer.model;
  }
  const std::string mismatch = DescribeModelMismatch(models);
  if (mismatch.empty()) return;
  // Wait for every worker's model (each refusal would blame the latest), unless time is up.
  const bool timed_out = MillisSince(created_) > options_.job.startup_timeout.count();
  if (offered_models_.size() < workers_.size() && !timed_out) return;
  RefuseJob(mismatch + "; every worker must build the same model");
}

Result<ShardMap> Coordinator::CurrentMap() const {
  std::vector<std::string> addresses;
  for (const Node& p : ps_) addresses.push_back(p.data_address);
  ShardMap map;
  if (map_) {
    EEN_ASSIGN_OR_RETURN(map, map_->WithAddresses(addresses, map_epoch_));
  } else {
    ShardingOptions sharding = options_.job.sharding;
    sharding.replicas = static_cast<uint32_t>(options_.job.replicas);
    EEN_ASSIGN_OR_RETURN(
        map, ShardMap::Build(model_, options_.job.ps, sharding, addresses, map_epoch_, PsHosts()));
  }
  map.SetLocalRoutes(LocalRoutes());
  return map;
}

std::vector<LocalRoute> Coordinator::LocalRoutes() const {
  std::vector<LocalRoute> routes;
  bool any = false;
  for (const Node& p : ps_) {
    routes.push_back(p.registered ? LocalRoute{p.host, p.local_address} : LocalRoute{});
    any = any || !routes.back().address.empty();
  }
  if (!any) routes.clear();  // no PS offers one: the map carries none
  return routes;
}

std::vector<std::string> Coordinator::PsHosts() const {
  std::vector<std::string> hosts;
  for (const Node& p : ps_) hosts.push_back(p.registered ? p.host : "");
  return hosts;
}

void Coordinator::RefreshPsHosts() {
  if (!map_) return;
  map_->SetPsHosts(PsHosts());
  map_->SetLocalRoutes(LocalRoutes());
}

Status Coordinator::SendJobStart(const Node& n, bool rebuild, uint64_t join_step) {
  EEN_ASSIGN_OR_RETURN(ShardMap map, CurrentMap());
  const bool rolled_back = rollback_.epoch() > 0;
  coordinator_messages::JobStartFields start{
      .rank = n.rank,
      .world_size = static_cast<int>(workers_.size()),
      .num_ps = static_cast<int>(ps_.size()),
      .map = &map,
      .optimizer = &optimizer_,
      .resume = !rebuild && (options_.resume || rolled_back),
      .start_step = rolled_back ? rollback_.step() : start_step_,
      .rollback_epoch = rollback_.epoch(),
      .rebuild = rebuild,
      .history = &membership_.history(),
      .consistency = options_.job.consistency,
      .dynamic_slicing = options_.job.dynamic_slicing == "auto",
      .data_batch = data_batch_,
  };
  if (join_step > 0) {
    start.resume = true;  // parameters come from the PS, not from this worker
    start.start_step = join_step;
    start.joining = true;
  }
  return listener_->Send(n.control, coordinator_messages::JobStart(start));
}

void Coordinator::NoteSnapshots() {
  std::vector<uint64_t> newest;  // of the PS serving shards (a drained one writes no more)
  for (int rank : ServingPs()) newest.push_back(ps_[rank].snapshot_step);
  if (auto complete = snapshots_.Note(newest)) {
    spdlog::info("snapshot of step {} complete on all {} PS", *complete, newest.size());
    SaveState();
  }
}

Status Coordinator::StartJob() {
  const bool sum = optimizer_.kind == OptimizerConfig::Kind::kSum;
  if (consistency_.per_arrival() && (sum || optimizer_.clip_grad_norm > 0)) {
    const std::string reason =
        "--consistency " + consistency_.Name() + " applies each gradient as it arrives, so " +
        (sum ? std::string("sum mode (the optimizer on the workers needs every step's mean)")
             : std::string("clip_grad_norm (it needs the whole step's norm)")) +
        " is not available with it: use --consistency bsp, or " +
        (sum ? "a server optimizer" : "no clipping");
    RefuseJob(reason);
    return FailedPrecondition(reason);
  }
  if (options_.resume && sum) {
    const std::string reason =
        "cannot resume a sum-mode job: its model and optimizer live in "
        "the workers, which snapshots do not hold";
    RefuseJob(reason);
    return FailedPrecondition(reason);
  }
  if (!options_.resume && options_.job.snapshot_every > 0) {
    // A new run's snapshots would mix with an earlier run's (the newest few
    // are kept, by step), and a later --resume could take the old run's.
    for (const Node& p : ps_) {
      if (p.earlier_snapshots.empty()) continue;
      const std::string reason = fmt::format(
          "the snapshot folder {} already holds an earlier run's snapshots (ps {}: steps {}): "
          "continue that run with --resume {}, give this run another --snapshot-dir, or "
          "delete the folder to start over",
          options_.snapshot_dir, p.rank, fmt::join(p.earlier_snapshots, ","),
          options_.snapshot_dir);
      RefuseJob(reason);
      return FailedPrecondition(reason);
    }
  }
  if (options_.resume) {
    std::vector<SnapshotAgreement::Found> intact;
    for (const Node& p : ps_) {
      intact.push_back({p.snapshot_steps, p.snapshot_problem, p.snapshot_folder_empty});
    }
    auto step = SnapshotAgreement::PickResumeStep(intact);
    if (!step.ok()) {
      RefuseJob(step.status().message());
      return step.status();
    }
    start_step_ = *step;
    spdlog::info("resuming from the snapshot of step {}", start_step_);
    if (consistency_.per_arrival()) TakeUpBatchesAt(start_step_);
  }
  EEN_ASSIGN_OR_RETURN(ShardMap map, CurrentMap());
  map_ = map;
  if (!options_.snapshot_dir.empty() && !ServesProcessGroups()) {
    if (Status s = WriteModelLayout(options_.snapshot_dir, {map, optimizer_}); !s.ok()) {
      spdlog::warn("{}; `eenctl export` of this job's snapshots needs it", s.message());
    }
  }
  std::string balance;
  for (uint64_t b : map.BytesPerPs()) balance += (balance.empty() ? "" : " / ") + std::to_string(b);
  if (ServesProcessGroups()) {
    spdlog::info(
        "job starts: {} workers of torch.distributed's een backend; their collectives go "
        "through the {} PS",
        workers_.size(), ps_.size());
    if (options_.job.snapshot_every > 0) {
      spdlog::warn(
          "--snapshot-every: the PS of torch.distributed's een backend hold no model (the "
          "workers do), so no snapshot is written; save checkpoints from the program "
          "(torch.save on rank 0), as with torchrun");
    }
  } else {
    spdlog::info(
        "job starts: {} tensors, {} parameters in {} chunks; bytes per PS {}; optimizer "
        "{}; {} cop{} of each shard",
        model_.size(), map.TotalNumel(), map.chunks().size(), balance,
        OptimizerName(optimizer_.kind), map.replicated() ? 2 : 1, map.replicated() ? "ies" : "y");
  }
  std::vector<MembershipChange> before;
  if (options_.resume && !options_.snapshot_dir.empty()) {
    // Where the data stood: the changes before the snapshot's step, then everyone again.
    auto saved = ReadMembershipLog(options_.snapshot_dir);
    if (saved.ok()) {
      for (MembershipChange& e : *saved) {
        if (e.step >= start_step_) continue;  // ours replaces one at it
        // No loader drew past the snapshot in this run: a loss's data follow by its step.
        if (e.data_step > start_step_) e.data_step = start_step_;
        before.push_back(std::move(e));
      }
    } else {
      spdlog::warn("{}: workers start as if every one had trained every step",
                   saved.status().message());
    }
  }
  if (options_.resume && !options_.snapshot_dir.empty()) {
    if (auto batch = ReadDataBatch(options_.snapshot_dir); batch.ok()) data_batch_ = *batch;
  }
  membership_.StartJob(std::move(before), start_step_, LiveWorkerRanks());
  SaveHistory();
  for (auto* nodes : {&ps_, &workers_}) {
    for (Node& n : *nodes) {
      // One that cannot be reached now (killed as the last one registered,
      // a connection being made again) is no reason to refuse the others:
      // it asks again (a live one repeats its registration each second), or
      // een-launch reports it gone, or its silence makes it lost.
      if (Status s = SendJobStart(n); !s.ok()) {
        spdlog::warn("could not send the job's start to {}: {}; it is lost if it stays silent",
                     Describe(n), s.ToString());
      }
      n.liveness.Restart(Clock::now());
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
  // Every process says who it is: a heartbeat without a pid could speak for
  // a replaced process or for its replacement.
  if (hb.getPid() <= 0) return InvalidArgument("heartbeat without a pid");
  wire::JobState state = state_;
  std::string reason = abort_reason_;
  if (n.pid != 0 && hb.getPid() != n.pid) {
    // A process that was replaced (back from a partition, say): it must stop.
    state = wire::JobState::ABORTED;
    reason = fmt::format("this process (pid {}) was replaced by pid {} after it was lost",
                         hb.getPid(), n.pid);
  } else {
    const Clock::time_point now = Clock::now();
    n.liveness.Heard(now);
    n.silence_cpu.reset();
    n.slow = false;
    if (role == wire::Role::WORKER && hb.getStep() > n.step && n.step > 0) {
      counters_.sync.Observe(hb.getSyncMicros() / 1000.0);
    }
    n.step = hb.getStep();
    n.compute_micros = hb.getComputeMicros();
    n.in_program_micros = hb.getInProgramMicros();
    n.replication_lag = hb.getReplicationLag();
    n.wait = role == wire::Role::PS && hb.getHasWait() ? WaitOf(hb.getWait(), now) : std::nullopt;
    if (role == wire::Role::WORKER) NoteProbes(n, hb.getProbes());
    n.loss = hb.getLoss();
    n.loss_given = hb.getLossGiven();
    n.samples = hb.getSamples();
    n.sync_micros = hb.getSyncMicros();
    n.staleness = hb.getStaleness();
    if (role == wire::Role::WORKER && hb.getDataBatch() > 0 && data_batch_ == 0) {
      NoteDataBatch(hb.getDataBatch());
    }
    if (role == wire::Role::WORKER && hb.getDataLookAhead() > data_look_ahead_) {
      NoteDataLookAhead(rank, hb.getDataLookAhead());
    }
    if (role == wire::Role::WORKER && options_.job.dynamic_slicing == "auto") {
      slices_.Observe(rank, n.step, n.compute_micros, hb.getBatchShare(), hb.getGlobalBatch());
      MaybeReslice();
    }
    // Metrics are for people: bad ones are dropped, the heartbeat counts.
    if (auto metrics = Metrics::FromWire(hb.getMetrics()); metrics.ok()) {
      n.metrics = std::move(*metrics);
      n.rates.Note(now, role, n.metrics, hb.getTraffic(), static_cast<int>(ps_.size()),
                   hb.getSamples());
    } else {
      n.metrics.clear();
      WarnCounted("bad metrics", fmt::format("dropped the metrics of {} {}: {}", RoleName(role),
                                             rank, metrics.status().message()));
    }
    if (Status s = events_.Add(role, rank, n.pid, n.host, hb.getClockOffsetMicros(), hb.getEvents(),
                               hb.getEventsDropped());
        !s.ok()) {
      WarnCounted("bad events", fmt::format("dropped the events of {} {}: {}", RoleName(role), rank,
                                            s.message()));
    }
    // The first steps of a job are slow anyway (allocations, warm-up): a
    // record of them alone helps little, so a stall there must be longer.
    const uint64_t stall_ms = static_cast<uint64_t>(options_.job.failover_threshold.count()) *
                              (n.wait && n.wait->step < kFlightSteps ? 5 : 1);
    if (state_ == wire::JobState::RUNNING && n.wait && n.wait->step != flight_step_ &&
        n.wait->waited_ms >= stall_ms &&
        (!last_stall_record_ || now - *last_stall_record_ > std::chrono::minutes(1))) {
      flight_step_ = n.wait->step;
      std::string who;
      // Workers in their own code all along (rank 0 evaluating, saving):
      // the program holds the step, not EEN; no record of EEN's steps.
      bool in_program = !n.wait->missing.empty();
      for (int w : n.wait->missing) {
        who += (who.empty() ? "" : ", ") + std::to_string(w);
        in_program &= w >= 0 && w < static_cast<int>(workers_.size()) &&
                      workers_[w].in_program_micros / 1000 + 1000 >= n.wait->waited_ms;
      }
      if (in_program) {
        spdlog::info(
            "step {} waits for worker(s) {}, busy in the program's own code for {} ms "
            "(an evaluation, a checkpoint?)",
            n.wait->step, who, n.wait->waited_ms);
      } else {
        last_stall_record_ = now;
        WriteFlightRecord(n.wait->step,
                          fmt::format("step {} has waited {} ms for the gradients of "
                                      "worker(s) {} (ps {})",
                                      n.wait->step, n.wait->waited_ms, who, n.rank),
                          false);
      }
    }
    if (role == wire::Role::PS) CheckBarrierAgainstStep(n, now);
    if (role == wire::Role::PS && hb.getChunksReady() != n.chunks_ready) {
      n.chunks_ready = hb.getChunksReady();
      if (n.chunks_ready == map_epoch_ && map_epoch_ > 1 && map_ && map_->replicated()) {
        spdlog::info("ps {} holds every chunk of shard map epoch {} (its backups are built)",
                     n.rank, map_epoch_);
      }
      MaybeSayBackupsBuilt();
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
      reason = fmt::format(
          "this {} was declared lost (silent longer than the failover "
          "threshold); the job went on without it",
          RoleName(role));
    }
  }
  // Told: the job ended, or (holding the final values) its final step.
  if (state == wire::JobState::SHUTDOWN || (final_step_ && n.final_taken)) n.told_end = true;
  return listener_->Send(peer, coordinator_messages::HeartbeatReply(
                                   incarnation_, map_epoch_, state, reason, hb.getSentMicros(),
                                   probe_since_ ? probe_round_ : 0, final_step_));
}

Status Coordinator::HandleMapRequest(const transport::PeerId& peer) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::WORKER) return InvalidArgument("map request from a non-worker");
  if (rollback_.active()) {
    rollback_.Queue(peer);  // answered once every PS is back
    return Status::Ok();
  }
  return SendJobStart(*n);
}

Status Coordinator::HandlePsCannotStart(const transport::PeerId& peer, wire::Error::Reader error) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::PS) return InvalidArgument("an error report from a non-PS");
  const std::string reason =
      fmt::format("ps {} cannot take up the job: {}", n->rank, error.getMessage().cStr());
  Abort(reason);  // the verdict first: the PS stops once answered
  return listener_->Send(peer, wire::MakeError(wire::ErrorCode::ABORTED, "job aborted: " + reason));
}

Status Coordinator::HandleBarrier(const transport::PeerId& peer, uint64_t sequence,
                                  uint64_t map_epoch) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::WORKER) return InvalidArgument("barrier from a non-worker");
  if (rollback_.active() || map_epoch < rollback_.epoch()) {
    spdlog::info(
        "worker {} came to barrier {} with shard map epoch {} (the latest rollback's is {}): "
        "sent back to redo its steps from the snapshot",
        n->rank, sequence, map_epoch, rollback_.epoch());
    return listener_->Send(peer, SentBackFromBarrier(sequence));
  }
  barriers_[sequence].insert(n->rank);
  ReleaseBarriers();
  return Status::Ok();
}

Status Coordinator::HandleBatchClaim(const transport::PeerId& peer, uint64_t sequence,
                                     uint64_t step, uint64_t not_before) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::WORKER) return InvalidArgument("batch claim from a non-worker");
  // No dataset has 2^62 batches: a claim beyond that (a lying or broken
  // worker) would wrap the count back to epoch 0's batches.
  constexpr uint64_t kMaxBatch = uint64_t{1} << 62;
  if (not_before >= kMaxBatch || (deal_again_.empty() && next_batch_ >= kMaxBatch)) {
    return InvalidArgument(fmt::format(
        "batch claim {} of worker {}: a batch from {} on (the next dealt is {}) is beyond any "
        "dataset (2^62 batches); nothing dealt",
        sequence, n->rank, not_before, next_batch_));
  }
  uint64_t batch;
  if (!deal_again_.empty()) {
    batch = deal_again_.front();
    deal_again_.pop_front();
  } else {
    // The epochs before the sampler's were trained in fixed shares (it
    // learned the batch size in the first): none of their batches is dealt.
    next_batch_ = std::max(next_batch_, not_before);
    batch = next_batch_++;
  }
  dealt_.try_emplace(n->rank, 4096).first->second.Note(step, batch);
  EEN_RETURN_IF_ERROR(
      listener_->Send(peer, coordinator_messages::BatchClaimReply(sequence, batch)));
  if (++batches_since_save_ >= kBatchesPerSave) SaveState();  // resets the count
  return Status::Ok();
}

size_t Coordinator::DealAgain(int worker, uint64_t from) {
  auto it = dealt_.find(worker);
  if (it == dealt_.end()) return 0;
  const size_t again = it->second.Rollback(from);
  while (std::optional<uint64_t> batch = it->second.Again()) deal_again_.push_back(*batch);
  dealt_.erase(it);
  return again;
}

transport::Message Coordinator::SentBackFromBarrier(uint64_t sequence) const {
  return wire::MakeError(
      wire::ErrorCode::STALE_EPOCH,
      fmt::format("barrier {}: a lost PS rolled the job back to the snapshot of step {}; the "
                  "steps from there are redone before the barrier",
                  sequence, rollback_.step()),
      sequence);
}

void Coordinator::SendBackFromBarriers() {
  for (const auto& [sequence, ranks] : barriers_) {
    for (int rank : ranks) {
      if (workers_[rank].lost || workers_[rank].done) continue;
      spdlog::info("worker {} waited at barrier {}: sent back to redo its steps from the snapshot",
                   rank, sequence);
      Ignored(listener_->Send(workers_[rank].control, SentBackFromBarrier(sequence)),
              "sending a worker back from its barrier");
    }
  }
  barriers_.clear();
}

void Coordinator::TakeUpBatchesAt(uint64_t step) {
  const uint64_t live = LiveWorkerRanks().size();
  const uint64_t at = live != 0 && step > UINT64_MAX / live ? UINT64_MAX : step * live;
  spdlog::info("NextBatch() deals batches from {} on ({} steps of {} worker{})", at, step, live,
               live == 1 ? "" : "s");
  next_batch_ = at;
}

void Coordinator::CheckBarrierAgainstStep(const Node& ps, Clock::time_point now) {
  auto at_barrier = [&](int rank) {
    for (const auto& [sequence, ranks] : barriers_) {
      if (ranks.count(rank)) return true;
    }
    return false;
  };
  int worker = -1;
  if (state_ == wire::JobState::RUNNING && !rollback_.active() && ps.wait) {
    for (int w : ps.wait->missing) {
      if (w >= 0 && w < static_cast<int>(workers_.size()) && at_barrier(w)) worker = w;
    }
  }
  if (worker < 0) {
    barrier_against_step_.erase(ps.rank);
    return;
  }
  auto [seen, first] =
      barrier_against_step_.try_emplace(ps.rank, BarrierAgainstStep{ps.wait->step, worker, now});
  if (!first && (seen->second.step != ps.wait->step || seen->second.worker != worker)) {
    seen->second = BarrierAgainstStep{ps.wait->step, worker, now};
  }
  // A gradient pushed just before Barrier() may still be on its way: only a
  // wait that lasts is a mismatch.
  const Clock::duration patience =
      std::max<Clock::duration>({std::chrono::seconds(5), 10 * options_.job.heartbeat_interval,
                                 3 * options_.job.failover_threshold});
  if (now - seen->second.since < patience) return;
  std::vector<int> stepping;
  for (const Node& w : workers_) {
    if (!w.done && !w.lost && !w.joining && !at_barrier(w.rank)) stepping.push_back(w.rank);
  }
  Abort(fmt::format(
      "worker {} waits at Barrier() while step {} on ps {} waits for its gradients, and "
      "worker(s) {} are still in Step(): the workers took different numbers of steps before "
      "the barrier, so none can go on. Every worker must take the same steps before "
      "Barrier(); a worker whose data ends early calls Finish() instead (it leaves the job and "
      "the others go on without it)",
      worker, seen->second.step, ps.rank, fmt::join(stepping, ",")));
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
      Ignored(
          listener_->Send(workers_[rank].control, coordinator_messages::BarrierReply(it->first)),
          "answering a barrier");
    }
    it = barriers_.erase(it);
  }
}

Status Coordinator::HandleDone(const transport::PeerId& peer, uint64_t steps, bool awaits_final) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::WORKER) return InvalidArgument("done from a non-worker");
  n->step = std::max(n->step, steps);  // newer than its last heartbeat
  if (awaits_final && !n->done) n->awaits_final = true;
  if (!n->done)
    WorkerFinished(
        *n, fmt::format("finished at step {}", n->step));  // else a repeat: our answer was lost
  return listener_->Send(peer, coordinator_messages::DoneReply());
}

void Coordinator::WorkerFinished(Node& n, const std::string& how) {
  n.done = true;
  const std::vector<int> still = LiveWorkerRanks();
  spdlog::info("worker {} {}", n.rank, how);
  if (state_ == wire::JobState::RUNNING && !still.empty() && !n.lost && !finished_change_at_) {
    // A normal end: the others finish within a moment too, and nothing
    // changes. Uneven data (DDP's join()): they go on without it, once
    // that moment passed (GoOnWithoutFinished).
    finished_change_at_ = Clock::now() + 2 * options_.job.heartbeat_interval;
  }
  ReleaseBarriers();
  MaybeFinish();
  SaveState();
}

void Coordinator::GoOnWithoutFinished() {
  finished_change_at_.reset();
  const std::vector<int> still = LiveWorkerRanks();
  if (state_ != wire::JobState::RUNNING || still.empty()) return;  // a normal end
  spdlog::info("the {} worker(s) still training ({}) go on without those that finished ({})",
               still.size(), fmt::join(still, ","),
               ServesProcessGroups() ? "a collective of their groups still waiting for them fails"
                                     : "no step waits for them any more");
  WantMembershipChange();
}

Status Coordinator::HandleWorkerExited(wire::WorkerExit::Reader exit) {
  const int rank = exit.getRank();
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) {
    return InvalidArgument(
        fmt::format("exit of worker rank {} (job has {})", rank, workers_.size()));
  }
  Node& w = workers_[rank];
  if (WithoutPs()) {
    w.rank = rank;  // (never registered)
    return PlainWorkerExited(w, exit);
  }
  if (w.done && w.awaits_final && w.pid == exit.getPid()) {
    w.told_end = true;  // it exited: nobody to tell
    if (!w.final_taken) {
      w.final_taken = true;  // it exited while it waited for the final values
      MaybeFinish();
    }
  }
  if (exit.getStatus() != 0) return Status::Ok();  // heartbeats tell a lost worker
  const bool same = w.registered && w.pid == exit.getPid() &&
                    (!exit.hasHost() || exit.getHost().size() == 0 || w.host == exit.getHost());
  if (state_ == wire::JobState::STARTING && !same) {
    RefuseJob(fmt::format(
        "worker {} (pid {}) exited with status 0 without joining the job: the program never "
        "created een::DataParallel (een-launch runs PROGRAM once per worker; it must be an EEN "
        "training program: een.DataParallel or init_process_group(\"een\"); or run with --ps 0 "
        "when "
        "it moves its own gradients, as a gloo DDP script does)",
        rank, exit.getPid()));
    return Status::Ok();
  }
  if (state_ == wire::JobState::RUNNING && same && !w.done && !w.lost) {
    WorkerFinished(w, ServesProcessGroups()
                          ? std::string("exited (status 0)")
                          : fmt::format("exited (status 0) without Finish() (its last heartbeat "
                                        "was at step {})",
                                        w.step));
  }
  return Status::Ok();
}

Status Coordinator::PlainWorkerExited(Node& w, wire::WorkerExit::Reader exit) {
  if (state_ != wire::JobState::RUNNING || w.done) return Status::Ok();
  if (exit.getStatus() != 0) {
    // As torchrun: one failed worker ends the job (others may wait for it in
    // a collective that never completes).
    Abort(fmt::format("worker {} (pid {}) exited with status {}", w.rank, exit.getPid(),
                      exit.getStatus()));
    return Status::Ok();
  }
  w.done = true;
  w.pid = exit.getPid();
  int done = 0;
  for (const Node& n : workers_) done += n.done;
  spdlog::info("worker {} (pid {}) finished (status 0); {} of {} done", w.rank, exit.getPid(), done,
               workers_.size());
  MaybeFinish();
  SaveState();
  return Status::Ok();
}

Status Coordinator::HandleFinalTaken(const transport::PeerId& peer) {
  Node* n = NodeByControl(peer);
  if (!n || n->role != wire::Role::WORKER || !n->done) {
    return InvalidArgument("final values taken by a worker that has not finished");
  }
  n->final_taken = true;
  n->told_end = true;  // it stops its heartbeats now
  MaybeFinish();
  SaveState();
  return listener_->Send(peer, coordinator_messages::DoneReply());
}

void Coordinator::MaybeFinish() {
  for (const Node& w : workers_) {
    if (!w.done && !w.lost) return;
  }
  if (state_ == wire::JobState::RUNNING && !final_step_) {
    // Training is over: the newest step any worker took holds the final
    // values. Under bsp a worker that took it holds them already.
    uint64_t last = 0;
    for (const Node& w : workers_) last = std::max(last, w.step);
    final_step_ = last;
    for (Node& w : workers_) {
      if (w.awaits_final && !consistency_.per_arrival() && w.step == last) w.final_taken = true;
    }
  }
  for (const Node& w : workers_) {
    if (w.awaits_final && !w.final_taken && !w.lost && state_ == wire::JobState::RUNNING) {
      return;  // it pulls the final values first (DataParallel::Finish())
    }
  }
  if (state_ == wire::JobState::RUNNING) {
    state_ = wire::JobState::SHUTDOWN;
    shutdown_at_ = Clock::now();
    if (!WithoutPs()) ReportProgress();
  }
}

bool Coordinator::AwaitingWorkersTold() {
  const auto now = Clock::now();
  bool told = true;
  for (Node& w : workers_) {
    if (w.awaits_final && !w.told_end && !w.lost && !GaveUpOnAwaiting(w, now)) told = false;
  }
  return told;
}

bool Coordinator::GaveUpOnAwaiting(Node& w, Clock::time_point now) {
  if (w.liveness.SilentMs(now) <= 10 * options_.job.failover_threshold.count()) return false;
  w.told_end = true;  // nobody to tell
  spdlog::warn("worker {} waited for the final values and went silent; the job ends without it",
               w.rank);
  return true;
}

Status Coordinator::HandlePsFault(const transport::PeerId& peer, const std::string& reason) {
  const Node* ps = NodeByControl(peer);
  if (!ps || ps->role != wire::Role::PS) {
    return InvalidArgument("a PS's fault report from a process that is no PS of the job");
  }
  if (state_ == wire::JobState::STARTING || state_ == wire::JobState::RUNNING) {
    Abort(fmt::format("ps {}: {}", ps->rank, reason));
  }
  return Status::Ok();
}

void Coordinator::HandleLeave(const transport::PeerId& peer) {
  if (Node* n = NodeByControl(peer); n && n->role == wire::Role::PS) {
    n->done = true;
    spdlog::info("ps {} left", n->rank);
    SaveState();
  }
}

void Coordinator::DrainInbox() {
  // Bounded: a flood of messages cannot keep the loop here.
  for (int i = 0; i < 100000 && state_ == wire::JobState::RUNNING; ++i) {
    auto envelope = listener_->Receive(milliseconds(0));
    if (!envelope.ok()) return;
    Handle(*envelope);
  }
}

void Coordinator::CheckLiveness() {
  const milliseconds threshold = options_.job.failover_threshold;
  const bool adaptive = options_.job.liveness != "fixed";
  auto now = Clock::now();
  auto allowance_of = [&](const Node& n) {
    return adaptive ? n.liveness.AllowanceMs(threshold) : static_cast<long>(threshold.count());
  };
  auto watched = [&](const Node& n) {
    return !n.done && !n.lost && !(n.role == wire::Role::WORKER && n.joining);
  };
  auto silent_past_allowance = [&](const Node& n) {
    return watched(n) && n.liveness.SilentMs(now) > allowance_of(n);
  };
  auto why = [&](const Node& n) {
    const long allowance = allowance_of(n);
    // (A worker of torch.distributed's een backend takes no steps of the job's.)
    const bool steps = !(ServesProcessGroups() && n.role == wire::Role::WORKER);
    return fmt::format("{} silent for {} ms > {}{}", Describe(n), n.liveness.SilentMs(now),
                       allowance == threshold.count()
                           ? fmt::format("failover threshold {} ms", allowance)
                           : fmt::format("its allowance {} ms (failover threshold {} ms, raised "
                                         "for its irregular heartbeats)",
                                         allowance, threshold.count()),
                       steps ? fmt::format(", last at step {}", n.step) : "");
  };
  // A finished worker waiting for the final values that went silent (its
  // heartbeats stop when it exits): the job ends without waiting for it.
  for (Node& w : workers_) {
    if (w.done && w.awaits_final && !w.final_taken && !w.lost && GaveUpOnAwaiting(w, now)) {
      w.final_taken = true;
      MaybeFinish();
    }
  }
  bool suspect = false;
  for (auto* nodes : {&ps_, &workers_}) {
    for (Node& n : *nodes) {
      suspect |= silent_past_allowance(n);
      // Half the threshold silent: its CPU time then, to tell a hung
      // process from a starved one later.
      if (watched(n) && !n.silence_cpu && n.liveness.SilentMs(now) > threshold.count() / 2) {
        const ProcessSighting s = Sight(n, threshold);
        if (s.state == ProcessSighting::State::kRunnable ||
            s.state == ProcessSighting::State::kIdle) {
          n.silence_cpu = s.cpu;
        }
      }
    }
  }
  if (!suspect) return;
  DrainInbox();        // its heartbeat may wait behind others
  now = Clock::now();  // (silences are judged after it)
  if (state_ != wire::JobState::RUNNING) return;
  // Why `n`, silent past its allowance, is lost; none when it is a process
  // of this machine that still runs (a busy machine starves it): it gets
  // time, up to a cap.
  auto lost_because = [&](Node& n) -> std::optional<std::string> {
    const ProcessSighting s = Sight(n, threshold);
    using State = ProcessSighting::State;
    switch (s.state) {
      case State::kElsewhere:
        return why(n);
      case State::kGone:  // it ended by itself or was killed: een-launch says which
        return fmt::format(
            "{} is gone (its process exited or was killed: een-launch's log says how), last "
            "at step {}",
            Describe(n), n.step);
      case State::kStopped:
        return why(n) + "; its process is stopped (SIGSTOP, or a debugger)";
      case State::kIdle:
        if (n.silence_cpu && s.cpu == *n.silence_cpu) {
          return why(n) + "; its process is asleep and used no CPU time meanwhile (hung?)";
        }
        if (!n.silence_cpu) n.silence_cpu = s.cpu;  // the next look decides
        break;
      case State::kRunnable:
        break;
    }
    const long cap = Liveness::kRunningSilenceFactor * threshold.count();
    if (n.liveness.SilentMs(now) > cap) {
      return why(n) + fmt::format(
                          "; its process still runs on its host, but silent past the {} ms a "
                          "running process is given",
                          cap);
    }
    if (!n.slow) {
      spdlog::warn(
          "{} silent for {} ms, but its process still runs on its host (a busy machine?): it "
          "gets up to {} ms before it counts as lost",
          Describe(n), n.liveness.SilentMs(now), cap);
      n.slow = true;
    }
    return std::nullopt;
  };
  for (Node& p : ps_) {
    if (!silent_past_allowance(p)) continue;
    if (auto reason = lost_because(p)) {
      PsLost(p, *reason);
      return;
    }
  }
  for (Node& w : workers_) {
    if (!silent_past_allowance(w)) continue;
    if (auto reason = lost_because(w)) {
      WorkerLost(w, *reason);
      if (state_ != wire::JobState::RUNNING) return;
    }
  }
}

void Coordinator::RefuseJob(const std::string& reason) {
  Abort(reason);  // first: the verdict is written before anyone hears of it
  const Message refusal =
      wire::MakeError(wire::ErrorCode::FAILED_PRECONDITION, "the job cannot start: " + reason);
  for (auto* nodes : {&ps_, &workers_}) {
    for (const Node& n : *nodes) {
      if (n.registered) Ignored(listener_->Send(n.control, refusal), "refusing a process");
    }
  }
  for (const auto& [rank, offer] : offered_models_) {  // workers whose model disagreed
    if (!workers_[rank].registered)
      Ignored(listener_->Send(offer.control, refusal), "refusing a worker whose model disagreed");
  }
}

void Coordinator::Abort(const std::string& reason) {
  if (state_ == wire::JobState::ABORTED) return;
  spdlog::error("{}", reason);
  std::string verdict = reason;
  if (state_ == wire::JobState::RUNNING && !events_.empty()) {
    if (const std::string path = WriteFlightRecord(NewestWorkerStep(), reason, true);
        !path.empty()) {
      verdict += " (flight record of the last steps: " + path + ")";
    }
  }
  state_ = wire::JobState::ABORTED;
  abort_reason_ = reason;
  aborted_at_ = Clock::now();
  if (!options_.verdict_path.empty()) {  // for een-launch's last line: the real cause
    const std::string tmp = options_.verdict_path + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << verdict;
    out.close();
    if (!out || std::rename(tmp.c_str(), options_.verdict_path.c_str()) != 0) {
      spdlog::warn("could not write the verdict to {}", options_.verdict_path);
    }
  }
}

void Coordinator::ReportProgress() {
  const double seconds = MillisSince(last_progress_) / 1000.0;
  if (ServesProcessGroups()) {  // a worker's "step": its collective calls done
    const std::vector<int> live = LiveWorkerRanks();
    const Node& lead = workers_[live.empty() ? 0 : live.front()];
    spdlog::info(
        "progress: {} collective calls done by worker {} | {:.0f} calls/s | {} live "
        "workers",
        lead.step, lead.rank,
        seconds > 0 && lead.step >= last_progress_calls_
            ? (lead.step - last_progress_calls_) / seconds
            : 0.0,
        live.size());
    last_progress_ = Clock::now();
    last_progress_calls_ = lead.step;
    return;
  }
  uint64_t samples = 0;
  for (const Node& w : workers_) samples += w.samples;
  const std::vector<int> live = LiveWorkerRanks();  // rank 0 may have finished early
  const Node& lead = workers_[live.empty() ? 0 : live.front()];
  // A replacement worker counts its samples from 0: the sum may go down once.
  const double rate = seconds > 0 && samples >= last_progress_samples_
                          ? (samples - last_progress_samples_) / seconds
                          : 0;
  // ssp/async: every live worker's own step and staleness.
  std::string steps;
  if (consistency_.per_arrival() && !live.empty()) {
    steps = " | steps";
    for (int r : live) {
      steps += fmt::format(" {}:{}(+{})", r, workers_[r].step, workers_[r].staleness);
    }
  }
  // --dynamic-slicing: each live worker's share of the global batch, once not equal.
  if (ShareOf(live.empty() ? -1 : live.front()) > 0) {
    steps += " | shares";
    for (int r : live) steps += fmt::format(" {}:{}", r, ShareOf(r));
  }
  spdlog::info("progress: step {} | loss {} | {:.0f} samples/s | sync {:.2f} ms{}", lead.step,
               lead.loss_given ? fmt::format("{:.4f}", lead.loss) : "-", rate,
               lead.sync_micros / 1000.0, steps);
  last_progress_ = Clock::now();
  last_progress_samples_ = samples;
}

}  // namespace een
