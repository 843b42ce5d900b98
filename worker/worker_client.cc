#include "worker/worker_client.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "common/error_codes.h"
#include "common/logging.h"
#include "common/optimizer_wire.h"
#include "common/receive_heap.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "common/wire_dtype.h"
#include "worker/worker_messages.h"

namespace een {

using std::chrono::milliseconds;
using transport::Message;
using Clock = std::chrono::steady_clock;

namespace {
int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}
}  // namespace

Result<std::unique_ptr<WorkerClient>> WorkerClient::Join(const JobEnvironment& env,
                                                         std::vector<TensorInfo> tensors,
                                                         const OptimizerConfig& optimizer) {
  EEN_RETURN_IF_ERROR(ValidateOptimizer(optimizer));
  // Every pulled frame is a large buffer ZeroMQ allocates; kept in the heap
  // when freed, the next step reuses its pages instead of faulting fresh
  // ones in (een-bench: 5,240 page faults per ResNet-50 step -> 0).
  KeepFreedReceiveBuffers();
  std::unique_ptr<WorkerClient> c(new WorkerClient(env));
  EEN_ASSIGN_OR_RETURN(transport::Device * control_device, transport::DeviceFor(env.coordinator));
  EEN_ASSIGN_OR_RETURN(c->control_, control_device->Connect(env.coordinator));
  Status decoded;
  EEN_RETURN_IF_ERROR(c->Request(
      worker_messages::Register(env.rank, HostName(), getpid(), tensors, optimizer),
      [&](wire::Header::Reader h) {
        if (!h.isJobStart()) return false;
        decoded = c->ApplyJobStart(h.getJobStart());
        return true;
      },
      env.startup_timeout, "the job to start", std::chrono::seconds(1)));
  EEN_RETURN_IF_ERROR(decoded);
  for (int r = 0; r < c->world_size_; ++r) c->live_workers_.push_back(r);
  // A worker joining a running job takes the membership history it is told
  // (its start step is the newest change's); others start with everyone.
  EEN_RETURN_IF_ERROR(c->TakeHistory(c->join_history_));
  WorkerClient* self = c.get();
  EEN_ASSIGN_OR_RETURN(
      c->heartbeat_,
      HeartbeatSender::Start(
          env.coordinator, env.heartbeat_interval, env.failover_threshold, &c->metrics_,
          [self](wire::Heartbeat::Builder hb) { self->FillHeartbeat(hb); }, &c->recorder_));
  return c;
}

void WorkerClient::FillHeartbeat(wire::Heartbeat::Builder hb) {
  hb.setRole(wire::Role::WORKER);
  hb.setRank(rank_);
  hb.setPid(getpid());
  hb.setStep(step_.load());
  hb.setLoss(loss_.load());
  hb.setLossGiven(loss_given_.load());
  hb.setSamples(samples_.load());
  hb.setSyncMicros(sync_micros_.load());
  hb.setDataBatch(data_batch_.load());
  hb.setDataLookAhead(static_cast<uint32_t>(data_look_ahead_.load()));
  hb.setComputeMicros(compute_micros_.load());
  if (const int64_t since = program_since_micros_.load(); since > 0) {
    hb.setInProgramMicros(static_cast<uint64_t>(std::max<int64_t>(SteadyMicros() - since, 0)));
  }
  hb.setStaleness(staleness_.load());
  hb.setBatchShare(reported_share_.load());
  hb.setGlobalBatch(reported_global_.load());
  {
    std::lock_guard<std::mutex> lock(traffic_mu_);
    auto list = hb.initTraffic(traffic_.size());
    for (size_t p = 0; p < traffic_.size(); ++p) {
      list[p].setPs(static_cast<int32_t>(p));
      list[p].setBytesOut(traffic_[p].out);
      list[p].setBytesIn(traffic_[p].in);
    }
  }
  std::lock_guard<std::mutex> lock(probe_mu_);
  auto list = hb.initProbes(probe_results_.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const ProbeResult& r = probe_results_[i];
    list[i].setRound(r.round);
    list[i].setPs(static_cast<int32_t>(r.ps));
    list[i].setBytes(r.bytes);
    list[i].setMicros(r.micros);
  }
}

Status WorkerClient::ApplyJobStart(wire::JobStart::Reader js) {
  EEN_ASSIGN_OR_RETURN(ShardMap map, ShardMap::FromWire(js.getMap()));
  EEN_ASSIGN_OR_RETURN(optimizer_, OptimizerFromWire(js.getOptimizer()));
  if (!map_.tensors().empty() && map.tensors().size() != map_.tensors().size()) {
    return Internal("the coordinator's new map is for another model");
  }
  rank_ = js.getRank();
  world_size_ = js.getWorldSize();
  resumed_ = js.getResume();
  joining_ = js.getJoining();
  start_step_ = js.getStartStep();
  if (js.hasConsistency() && js.getConsistency().size() > 0) {
    EEN_ASSIGN_OR_RETURN(consistency_, Consistency::Parse(js.getConsistency()));
  }
  rollback_epoch_ = js.getRollbackEpoch();
  dynamic_slicing_ = js.getDynamicSlicing();
  if (js.getDataBatch() > 0) data_batch_ = js.getDataBatch();
  join_history_.clear();
  for (auto m : js.getHistory()) join_history_.push_back(wire::MembershipFromWire(m));
  map_ = std::move(map);
  return ConnectToPs();
}

Status WorkerClient::ConnectToPs() {
  std::vector<std::unique_ptr<transport::Connection>> before = std::move(ps_);
  ps_.clear();
  ps_generation_.resize(map_.num_ps(), 0);
  outstanding_.clear();  // answers to requests routed with the old map never come
  deferred_.assign(map_.num_ps(), {});
  ps_chunks_.assign(map_.num_ps(), {});
  for (uint32_t i = 0; i < map_.chunks().size(); ++i) ps_chunks_[map_.OwnerOfChunk(i)].push_back(i);
  // Per pair: a PS of this host through its same-host route, if it has one.
  const std::string host = HostName();
  std::string routes;
  for (uint32_t p = 0; p < map_.num_ps(); ++p) {
    const std::string& address = map_.AddressFor(p, host);
    if (keep_ps_connections_ && p < before.size() && before[p]->address() == address) {
      ps_.push_back(std::move(before[p]));  // the same process: answers on their way still come
      continue;
    }
    EEN_ASSIGN_OR_RETURN(transport::Device * device, transport::DeviceFor(address));
    EEN_ASSIGN_OR_RETURN(auto connection, device->Connect(address));
    ps_.push_back(std::move(connection));
    ++ps_generation_[p];
    if (!map_.local_routes().empty()) {
      routes += fmt::format("{}ps {} {}", routes.empty() ? "" : ", ", p,
                            address == map_.ps_addresses()[p] ? "over tcp" : "in shared memory");
    }
  }
  if (!routes.empty() && routes != reported_routes_) {
    spdlog::info("data plane: {}", routes);
    reported_routes_ = routes;
  }
  return Status::Ok();
}

bool WorkerClient::NeedsRecovery() const {
  return stale_seen_ || (heartbeat_ && heartbeat_->map_epoch() > map_.epoch());
}

Result<WorkerClient::Recovery> WorkerClient::Recover() {
  recoveries_.Add();
  const uint64_t known_rollback = rollback_epoch_;
  Status applied;
  // The coordinator's map may be the one this worker has: a PS's refusal of
  // a message sent under an older map can arrive after the worker already
  // moved on. Then nothing moved (waiting for a newer map would wait for
  // ever): the step's pushes go again and the PS drop what they counted.
  bool moved = false;
  EEN_RETURN_IF_ERROR(Request(
      worker_messages::MapRequest(rank_),
      [&](wire::Header::Reader h) {
        if (!h.isJobStart() || h.getJobStart().getMap().getEpoch() < map_.epoch()) return false;
        moved = h.getJobStart().getMap().getEpoch() > map_.epoch();
        if (moved) applied = ApplyJobStart(h.getJobStart());
        return true;
      },
      std::chrono::hours(1), "the shard map after a PS was lost",
      // Asked again each second: an answer that went astray (a role test
      // once saw a worker wait here for ever) costs a second, not the job.
      std::chrono::seconds(1)));
  EEN_RETURN_IF_ERROR(applied);
  stale_seen_ = false;
  if (!moved) {
    spdlog::info("shard map epoch {} is still the newest: sending this step's gradients again",
                 map_.epoch());
    return Recovery{false, start_step_};
  }
  Recovery r;
  r.rolled_back = rollback_epoch_ > known_rollback;
  r.step = start_step_;
  if (r.rolled_back) {
    spdlog::warn("every PS rolled back: shard map epoch {}, training again from step {}{}",
                 map_.epoch(), start_step_,
                 consistency_.per_arrival() ? " (each worker from its own step there)" : "");
  } else if (keep_ps_connections_) {  // the een backend: nothing to send again
    spdlog::warn(
        "the PS changed (shard map epoch {}): collective calls in flight are answered by their "
        "other copies",
        map_.epoch());
  } else {
    spdlog::warn(
        "shards moved (shard map epoch {}): sending this step's gradients to their "
        "new primaries",
        map_.epoch());
    if (initial_) {  // before step 1: a lost primary's backup may not hold them yet
      spdlog::info("sending the initial values again (the new primaries keep those they hold)");
      EEN_RETURN_IF_ERROR(PushToOwners(wire::PushKind::INITIAL, 0, initial_->chunks, initial_->data,
                                       initial_->owner, /*again=*/true));
    }
  }
  return r;
}

WorkerClient::~WorkerClient() {
  if (!finished_ && heartbeat_ && heartbeat_->state() == HeartbeatSender::State::kRunning) {
    Ignored(Finish(), "finishing on the way out");
  }
}

Status WorkerClient::JobStatus() const {
  if (heartbeat_ && heartbeat_->state() == HeartbeatSender::State::kAborted) {
    return Aborted("job aborted: " + heartbeat_->reason());
  }
  return Status::Ok();
}

Status WorkerClient::Request(const Message& request,
                             const std::function<bool(wire::Header::Reader)>& accept,
                             milliseconds timeout, const std::string& what,
                             milliseconds resend_every) {
  EEN_RETURN_IF_ERROR(control_->Send(request));
  auto next_resend = Clock::now() + resend_every;
  uint64_t incarnation = heartbeat_ ? heartbeat_->incarnation() : 0;
  const auto deadline = Clock::now() + timeout;
  while (true) {
    EEN_RETURN_IF_ERROR(JobStatus());
    if (Clock::now() > deadline) {
      return DeadlineExceeded(
          fmt::format("no answer from the coordinator at {} within {} ms "
                      "while waiting for {}",
                      env_.coordinator, timeout.count(), what));
    }
    if (heartbeat_ && heartbeat_->incarnation() != incarnation) {
      if (incarnation != 0) {
        spdlog::info("the coordinator restarted; asking again for {}", what);
        EEN_RETURN_IF_ERROR(control_->Send(request));
      }
      incarnation = heartbeat_->incarnation();
    }
    if (resend_every.count() > 0 && Clock::now() > next_resend) {
      EEN_RETURN_IF_ERROR(control_->Send(request));
      next_resend = Clock::now() + resend_every;
    }
    auto reply = control_->Receive(milliseconds(50));
    if (!reply.ok() && reply.status().code() == StatusCode::kPermissionDenied)
      return reply.status();
    if (!reply.ok()) continue;
    bool accepted = false;
    EEN_RETURN_IF_ERROR(wire::Visit(*reply, [&](wire::Header::Reader h) -> Status {
      if (h.isError()) return StatusOf(h.getError(), "coordinator: ");
      accepted = accept(h);
      return Status::Ok();
    }));
    if (accepted) return Status::Ok();
  }
}

Status WorkerClient::Push(wire::PushKind kind, uint64_t step, const std::vector<uint32_t>& chunks,
                          const std::vector<const float*>& data,
                          const std::shared_ptr<const void>& owner) {
  EEN_RETURN_IF_ERROR(JobStatus());
  if (kind == wire::PushKind::INITIAL) {
    for (uint32_t c : chunks) {
      if (c >= map_.chunks().size())
        return InvalidArgument("chunk " + std::to_string(c) + " is not in the model");
    }
    InitialValues kept{chunks, data, owner};
    initial_ = std::move(kept);
    // A PS was lost already: Recover() sends them, to the new owners.
    if (NeedsRecovery()) return Status::Ok();
    // A joining worker 0 sends them "again": the PS keep any they hold.
    return PushToOwners(kind, step, chunks, data, owner, /*again=*/joining_);
  }
  return PushToOwners(kind, step, chunks, data, owner, /*again=*/false);
}

Status WorkerClient::PushToOwners(wire::PushKind kind, uint64_t step,
                                  const std::vector<uint32_t>& chunks,
                                  const std::vector<const float*>& data,
                                  const std::shared_ptr<const void>& owner, bool again) {
  if (NeedsRecovery()) return Aborted("the shard map moved on (a PS was replaced)");
  // Initial values go as fp32: they become the PS's fp32 master values;
  // buffers too. Each PS's chunks of one dtype, in the order given, in one
  // message, or cut into messages of at most message_bytes on the wire.
  const bool initial = kind == wire::PushKind::INITIAL;
  std::vector<std::vector<size_t>> by_ps(ps_.size());
  for (size_t i = 0; i < chunks.size(); ++i) by_ps[map_.OwnerOfChunk(chunks[i])].push_back(i);
  for (size_t p = 0; p < ps_.size(); ++p) {
    for (const WireType type : TypesInUse()) {
      std::vector<size_t> of_type;
      for (size_t i : by_ps[p]) {
        if ((initial ? WireType::kF32 : TypeOf(chunks[i])) == type) of_type.push_back(i);
      }
      std::vector<size_t> message;
      size_t bytes = 0;
      for (size_t k = 0; k < of_type.size(); ++k) {
        const size_t i = of_type[k];
        message.push_back(i);
        bytes += size_t{map_.chunks()[chunks[i]].numel} * WireBytes(type);
        const bool full = env_.message_bytes > 0 && bytes >= env_.message_bytes;
        if (full || k + 1 == of_type.size()) {
          EEN_RETURN_IF_ERROR(
              PushMessage(p, kind, type, step, chunks, message, data, owner, again));
          message.clear();
          bytes = 0;
        }
      }
    }
  }
  return Status::Ok();
}

Status WorkerClient::PushMessage(size_t p, wire::PushKind kind, WireType type, uint64_t step,
                                 const std::vector<uint32_t>& chunks,
                                 const std::vector<size_t>& indices,
                                 const std::vector<const float*>& data,
                                 const std::shared_ptr<const void>& owner, bool again) {
  std::vector<uint32_t> ids;
  ids.reserve(indices.size());
  std::vector<transport::Frame> payload;
  payload.reserve(indices.size());
  std::shared_ptr<std::vector<uint16_t>> converted;
  size_t at = 0;
  if (type != WireType::kF32) {
    size_t numel = 0;
    for (size_t i : indices) numel += map_.chunks()[chunks[i]].numel;
    converted = WireBuffer(numel);
  }
  const bool step_push = kind == wire::PushKind::GRADIENT;
  for (const size_t i : indices) {
    const size_t numel = map_.chunks()[chunks[i]].numel;
    ids.push_back(chunks[i]);
    if (step_push && map_.KindOfChunk(chunks[i]) == TensorKind::kFrozen) {
      payload.emplace_back();  // the step goes by; the values stay
    } else if (converted) {
      uint16_t* out = converted->data() + at;
      EncodeWire(type, data[i], out, numel);
      payload.push_back(transport::Frame::Borrow(out, numel * 2, converted));
      at += numel;
    } else {
      payload.push_back(transport::Frame::Borrow(data[i], numel * sizeof(float), owner));
    }
  }
  worker_messages::PushFields fields{.epoch = map_.epoch(),
                                     .step = step,
                                     .worker = rank_,
                                     .kind = kind,
                                     .dtype = wire::DTypeOf(type),
                                     .lr = lr_,
                                     .again = again};
  if (env_.pull_back && step_push) {  // frozen chunks are answered empty
    PullRequest r{static_cast<uint32_t>(p), next_request_++, step + 1, sum_mode(), type, ids};
    fields.pull_back = r.id;
    outstanding_.push_back(std::move(r));
  }
  Message m = worker_messages::Push(fields, ids, std::move(payload));
  const size_t bytes = m.payload_bytes();
  const auto sending = std::chrono::steady_clock::now();
  if (Status s = ps_[p]->Send(std::move(m)); !s.ok()) {
    return Unavailable(
        fmt::format("push to PS {} ({}) failed: {}", p, ps_[p]->address(), s.message()));
  }
  if (step_push && !ids.empty()) {
    recorder_.Record(EventKind::kPushSent, step, sending, std::chrono::steady_clock::now(),
                     static_cast<uint32_t>(p), ids.front(), static_cast<uint32_t>(ids.size()));
  }
  pushes_.Add();
  push_bytes_.Add(bytes);
  CountTraffic(p, bytes, 0);
  return Status::Ok();
}

Result<std::shared_ptr<float>> WorkerClient::GradientBuffer(size_t numel) {
  // On the heap where the device would copy anyway (tcp, ipc) or the
  // gradients are converted to another wire dtype before sending.
  // Shared memory where any PS is reached through it (a tcp PS sends from it
  // as from any memory); ConnectToPs picked each PS's route.
  std::string in_place;
  for (const auto& connection : ps_) {
    if (in_place.empty() && transport::SendsInPlace(connection->address())) {
      in_place = connection->address();
    }
  }
  if (env_.wire_type != WireType::kF32 || in_place.empty()) {
    auto heap = std::make_shared<std::vector<float>>(numel);
    return std::shared_ptr<float>(heap, heap->data());
  }
  if (numel > SIZE_MAX / sizeof(float)) return ResourceExhausted("a gradient bucket too large");
  EEN_ASSIGN_OR_RETURN(transport::Device * device, transport::DeviceFor(in_place));
  EEN_ASSIGN_OR_RETURN(transport::RegisteredMemory memory,
                       device->Allocate(numel * sizeof(float), "grads"));
  auto owner = std::make_shared<transport::RegisteredMemory>(std::move(memory));
  return std::shared_ptr<float>(owner, static_cast<float*>(owner->data()));
}

std::shared_ptr<std::vector<uint16_t>> WorkerClient::WireBuffer(size_t numel) {
  for (auto& b : wire_buffers_) {
    if (b.use_count() == 1 && b->size() >= numel) return b;  // no frame holds it any more
  }
  wire_buffers_.push_back(std::make_shared<std::vector<uint16_t>>(numel));
  return wire_buffers_.back();
}

Result<uint64_t> WorkerClient::PullRecovering(uint64_t min_version,
                                              const std::function<float*(uint32_t)>& destination,
                                              bool frozen_too, int max_recoveries) {
  for (int recoveries = 0;; ++recoveries) {
    Status s = Pull(min_version, /*gradients=*/false, destination, frozen_too);
    if (s.ok()) return min_version;
    // A PS lost before everyone had the first values: the shards moved
    // (worker 0 sends its initial values again), or every PS rolled back.
    if (!NeedsRecovery() || recoveries == max_recoveries) return s;
    EEN_ASSIGN_OR_RETURN(Recovery r, Recover());
    if (r.rolled_back) min_version = r.step;
  }
}

Status WorkerClient::Pull(uint64_t min_version, bool gradients,
                          const std::function<float*(uint32_t)>& destination, bool frozen_too) {
  // Pull-backs of another version (pushes never pulled) are forgotten: their
  // answers are dropped when they come.
  std::erase_if(outstanding_, [&](const PullRequest& r) {
    return r.min_version != min_version || r.gradients != gradients;
  });
  std::vector<bool> covered(map_.chunks().size(), false);
  for (const PullRequest& r : outstanding_) {
    for (uint32_t c : r.chunks) covered[c] = true;
  }
  auto message = [&](const PullRequest& r, bool again) {
    return worker_messages::Pull({.epoch = map_.epoch(),
                                  .min_version = r.min_version,
                                  .worker = rank_,
                                  .gradients = r.gradients,
                                  .dtype = wire::DTypeOf(r.type),
                                  .request_id = r.id,
                                  .frozen_values = r.frozen_values,
                                  .final_values = finished_,
                                  .again = again},
                                 r.chunks);
  };
  for (size_t p = 0; p < ps_.size(); ++p) {
    for (const WireType type : TypesInUse()) {  // one request per dtype
      PullRequest r{static_cast<uint32_t>(p), 0, min_version, gradients, type, {}, frozen_too};
      for (uint32_t c : ps_chunks_[p]) {
        if (!covered[c] && TypeOf(c) == type) r.chunks.push_back(c);
      }
      if (!r.chunks.empty()) {
        r.id = next_request_++;
        EEN_RETURN_IF_ERROR(Send(p, message(r, false), fmt::format("pull from PS {}", p)));
        outstanding_.push_back(std::move(r));
      }
    }
  }
  for (size_t p = 0; p < ps_.size(); ++p) {
    auto waiting = [&] {
      return std::any_of(outstanding_.begin(), outstanding_.end(),
                         [&](const PullRequest& r) { return r.ps == p; });
    };
    auto ask_again = [&]() -> Status {
      for (const PullRequest& r : outstanding_) {
        if (r.ps != p) continue;
        EEN_RETURN_IF_ERROR(Send(p, message(r, true), fmt::format("pull from PS {}", p)));
      }
      return Status::Ok();
    };
    EEN_RETURN_IF_ERROR(WaitForPs(
        p, waiting, fmt::format("to reach version {}", min_version),
        [&](const Message& m) { return TakePullReply(p, m, min_version, destination); },
        /*set_aside_first=*/true, ask_again));
  }
  // Every chunk reached step 1: each chunk's backup holds it (a primary
  // answers only what its backup confirmed), so the initial values are safe.
  if (min_version >= 1) initial_.reset();
  return Status::Ok();
}

Status WorkerClient::PullState(uint64_t min_version, const StateTaker& take) {
  if (sum_mode()) return FailedPrecondition("in sum mode the PS hold no optimizer state");
  std::vector<uint64_t> ids(ps_.size(), 0);  // per PS: the request (0: none)
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (ps_chunks_[p].empty()) continue;
    ids[p] = next_request_++;
    EEN_RETURN_IF_ERROR(Send(p,
                             worker_messages::Pull({.epoch = map_.epoch(),
                                                    .min_version = min_version,
                                                    .worker = rank_,
                                                    .dtype = wire::DTypeOf(WireType::kF32),
                                                    .request_id = ids[p],
                                                    .optimizer_state = true},
                                                   ps_chunks_[p]),
                             fmt::format("checkpoint pull from PS {}", p)));
  }
  for (size_t p = 0; p < ps_.size(); ++p) {
    auto take_reply = [&](const Message& m) {
      return wire::Visit(m, [&](wire::Header::Reader h) -> Status {
        if (h.isError()) return PsError(p, h.getError());
        if (!h.isPullReply() || h.getPullReply().getRequestId() != ids[p]) {
          return Status::Ok();  // an answer to a request given up since
        }
        auto reply = h.getPullReply();
        auto chunks = reply.getChunks();
        auto versions = reply.getVersions();
        const uint32_t slots = reply.getStateSlots();
        if (chunks.size() != ps_chunks_[p].size() || versions.size() != chunks.size() ||
            m.payload_count() != chunks.size() || slots > kMaxStateSlots) {
          return Internal(fmt::format(
              "PS {} answered a checkpoint pull with {} chunks, {} versions, {} frames and {} "
              "state slots; asked for {} chunks",
              p, chunks.size(), versions.size(), m.payload_count(), slots, ps_chunks_[p].size()));
        }
        for (uint32_t k = 0; k < chunks.size(); ++k) {
          const uint32_t c = chunks[k];
          const uint32_t with =
              map_.KindOfChunk(ps_chunks_[p][k]) == TensorKind::kParameter ? slots : 0;
          const size_t want = size_t{map_.chunks()[ps_chunks_[p][k]].numel} * (1 + with);
          if (c != ps_chunks_[p][k] || m.payload(k).size() != want * sizeof(float)) {
            return Internal(fmt::format("PS {} answered chunk {} of a checkpoint with {} bytes", p,
                                        c, m.payload(k).size()));
          }
          // Frames are not always float-aligned: copy out.
          std::vector<float> data(want);
          std::memcpy(data.data(), m.payload(k).data(), m.payload(k).size());
          EEN_RETURN_IF_ERROR(take(c, versions[k], data.data(), with));
        }
        ids[p] = 0;
        return Status::Ok();
      });
    };
    EEN_RETURN_IF_ERROR(WaitForPs(
        p, [&] { return ids[p] != 0; }, fmt::format("for a checkpoint at step {}", min_version),
        take_reply, /*set_aside_first=*/false));
  }
  return Status::Ok();
}

Status WorkerClient::PushState(uint64_t step, std::shared_ptr<const ChunkStates> chunks,
                               bool again) {
  EEN_RETURN_IF_ERROR(JobStatus());
  if (NeedsRecovery()) return Aborted("the shard map moved on (a PS was replaced)");
  if (chunks->size() != map_.chunks().size()) {
    return InvalidArgument("a checkpoint of " + std::to_string(chunks->size()) + " chunks for " +
                           std::to_string(map_.chunks().size()));
  }
  // Per PS, messages of at most about 64 MiB.
  constexpr size_t kMessageBytes = size_t{64} << 20;
  for (size_t p = 0; p < ps_.size(); ++p) {
    std::vector<uint32_t> ids;
    std::vector<transport::Frame> payload;
    size_t bytes = 0;
    auto send = [&] {
      worker_messages::PushFields fields{.epoch = map_.epoch(),
                                         .step = step,
                                         .worker = rank_,
                                         .kind = wire::PushKind::STATE,
                                         .dtype = wire::DTypeOf(WireType::kF32),
                                         .again = again};
      Message m = worker_messages::Push(fields, ids, std::move(payload));
      ids.clear();
      payload.clear();
      bytes = 0;
      return Send(p, std::move(m), fmt::format("checkpoint push to PS {}", p));
    };
    for (uint32_t c : ps_chunks_[p]) {
      const std::vector<float>& data = (*chunks)[c];
      ids.push_back(c);
      payload.push_back(transport::Frame::Borrow(data.data(), data.size() * sizeof(float), chunks));
      bytes += data.size() * sizeof(float);
      if (bytes >= kMessageBytes) EEN_RETURN_IF_ERROR(send());
    }
    if (!ids.empty()) EEN_RETURN_IF_ERROR(send());
  }
  return Status::Ok();
}

Status WorkerClient::WaitForPs(size_t p, const std::function<bool()>& waiting,
                               const std::string& what,
                               const std::function<Status(const Message&)>& take,
                               bool set_aside_first, const std::function<Status()>& ask_again) {
  const auto waiting_since = Clock::now();
  auto next_warning = waiting_since + std::chrono::seconds(30);
  auto next_ask = waiting_since + kAskAgainAfter;
  while (waiting()) {
    if (set_aside_first && !deferred_[p].empty()) {  // came while another answer was awaited
      Message m = std::move(deferred_[p].front());
      deferred_[p].pop_front();
      EEN_RETURN_IF_ERROR(take(m));
      continue;
    }
    EEN_RETURN_IF_ERROR(JobStatus());
    if (NeedsRecovery()) return Aborted("the shard map moved on (a PS was replaced)");
    if (Clock::now() > next_warning) {
      spdlog::warn(
          "still waiting for PS {} ({}) {} after {} s", p, ps_[p]->address(), what,
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - waiting_since).count());
      next_warning += std::chrono::seconds(30);
    }
    if (ask_again && Clock::now() > next_ask) {
      if (next_ask == waiting_since + kAskAgainAfter) {
        spdlog::debug("no answer from PS {} ({}) {} for {} s: asking again", p, ps_[p]->address(),
                      what,
                      std::chrono::duration_cast<std::chrono::seconds>(kAskAgainAfter).count());
      }
      EEN_RETURN_IF_ERROR(ask_again());
      next_ask += kAskAgainAfter;
    }
    auto reply = ps_[p]->Receive(milliseconds(50));
    if (!reply.ok() && reply.status().code() == StatusCode::kPermissionDenied)
      return reply.status();
    if (!reply.ok()) continue;
    EEN_RETURN_IF_ERROR(take(*reply));
  }
  return Status::Ok();
}

Status WorkerClient::Send(size_t p, Message message, const std::string& what) {
  if (Status s = ps_[p]->Send(std::move(message)); !s.ok()) {
    return Unavailable(what + " failed: " + s.message());
  }
  return Status::Ok();
}

Result<double> WorkerClient::ClipGradients(uint64_t step) {
  EEN_RETURN_IF_ERROR(JobStatus());
  if (NeedsRecovery()) return Aborted("the shard map moved on (a PS was replaced)");
  EEN_ASSIGN_OR_RETURN(const double total, GatherNorm(step));
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (ps_chunks_[p].empty()) continue;  // holds nothing: takes no part
    EEN_RETURN_IF_ERROR(Send(p, worker_messages::ClipNorm(rank_, map_.epoch(), step, total),
                             fmt::format("sending the gradient norm to PS {}", p)));
  }
  return total;
}

Result<double> WorkerClient::GatherNorm(uint64_t step) {
  struct Share {
    uint64_t id = 0;
    bool answered = false, applied = false;
    double total = 0;
  };
  std::vector<Share> shares(ps_.size());
  std::vector<double> chunk_sums(map_.chunks().size(), 0.0);
  // A PS that holds no chunks (one lost, its shards moved away) has no share.
  auto holds_chunks = [&](size_t p) { return !ps_chunks_[p].empty(); };
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (!holds_chunks(p)) continue;
    shares[p].id = next_request_++;
    EEN_RETURN_IF_ERROR(Send(p, worker_messages::NormQuery(rank_, map_.epoch(), step, shares[p].id),
                             fmt::format("norm query to PS {}", p)));
  }
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (!holds_chunks(p)) continue;
    auto take = [&](const Message& m) {
      return wire::Visit(m, [&](wire::Header::Reader h) -> Status {
        if (h.isNormReply() && h.getNormReply().getRequestId() == shares[p].id) {
          auto reply = h.getNormReply();
          auto chunks = reply.getChunks();
          auto sums = reply.getSumSquares();
          if (chunks.size() != sums.size()) {
            return Internal(fmt::format("PS {} answered a norm query with {} chunks and {} sums", p,
                                        chunks.size(), sums.size()));
          }
          for (uint32_t i = 0; i < chunks.size(); ++i) {
            if (chunks[i] >= map_.chunks().size() || map_.OwnerOfChunk(chunks[i]) != p) {
              return Internal(fmt::format("PS {} sent the norm of chunk {}, which it does not hold",
                                          p, chunks[i]));
            }
            chunk_sums[chunks[i]] = sums[i];
          }
          shares[p] = {shares[p].id, true, reply.getApplied(), reply.getTotalNorm()};
          return Status::Ok();
        }
        if (h.isError()) return PsError(p, h.getError());
        if (!h.isNormReply()) deferred_[p].push_back(m);  // a pull answer: for Pull()
        return Status::Ok();
      });
    };
    EEN_RETURN_IF_ERROR(WaitForPs(
        p, [&] { return !shares[p].answered; },
        fmt::format("for its share of step {}'s gradient norm", step), take,
        /*set_aside_first=*/false));
  }
  // Summed in chunk order on every worker: the same total, wherever the
  // chunks are (a failover moves them, the norm stays bitwise the same).
  std::optional<double> applied;
  for (const Share& share : shares) {
    if (share.applied) applied = share.total;  // a backup took over: its primary's total
  }
  double sum = 0;
  for (double s : chunk_sums) sum += s;
  return applied ? *applied : std::sqrt(sum);
}

Status WorkerClient::PsError(size_t p, wire::Error::Reader error) {
  if (error.getCode() == wire::ErrorCode::STALE_EPOCH) {
    stale_seen_ = true;  // the PS has a newer map than ours
    return Aborted(fmt::format("PS {} has a newer shard map", p));
  }
  return StatusOf(error, fmt::format("PS {} refused this worker's request: ", p));
}

uint64_t WorkerClient::Staleness() const {
  if (!consistency_.per_arrival() || slowest_ > slowest_version_) return 0;
  return slowest_version_ - slowest_;
}

Status WorkerClient::TakePullReply(size_t p, const Message& m, uint64_t min_version,
                                   const std::function<float*(uint32_t)>& destination) {
  return wire::Visit(m, [&](wire::Header::Reader h) -> Status {
    if (h.isError()) return PsError(p, h.getError());
    if (h.isNormReply()) return Status::Ok();  // of a norm query given up since
    if (!h.isPullReply()) {
      spdlog::warn("dropped an unexpected message from PS {}", p);
      return Status::Ok();
    }
    auto reply = h.getPullReply();
    auto request = std::find_if(
        outstanding_.begin(), outstanding_.end(),
        [&](const PullRequest& r) { return r.ps == p && r.id == reply.getRequestId(); });
    if (request == outstanding_.end()) return Status::Ok();  // for a request forgotten since
    auto chunks = reply.getChunks();
    const WireType type = request->type;
    if (chunks.size() != request->chunks.size() || m.payload_count() != chunks.size() ||
        reply.getDtype() != wire::DTypeOf(type)) {
      return Internal(
          fmt::format("PS {} answered a pull with {} chunks in {} frames of dtype {}; "
                      "asked for {} in {}",
                      p, chunks.size(), m.payload_count(), int(reply.getDtype()),
                      request->chunks.size(), WireTypeName(type)));
    }
    // Frozen chunks come empty (their version is there) unless their values were asked for.
    auto values_of = [&](uint32_t c) {
      return request->frozen_values || map_.KindOfChunk(c) != TensorKind::kFrozen;
    };
    for (uint32_t k = 0; k < chunks.size(); ++k) {
      const uint32_t c = chunks[k];
      const size_t want = values_of(c) ? size_t{map_.chunks()[c].numel} * WireBytes(type) : 0;
      if (c != request->chunks[k] || m.payload(k).size() != want) {
        return Internal(
            fmt::format("PS {} answered chunk {} with {} bytes", p, c, m.payload(k).size()));
      }
    }
    pull_replies_.Add();
    pull_bytes_.Add(m.payload_bytes());
    CountTraffic(p, 0, m.payload_bytes());
    for (uint32_t k = 0; k < chunks.size(); ++k) {
      if (!values_of(chunks[k])) continue;
      DecodeWire(type, m.payload(k).data(), destination(chunks[k]), map_.chunks()[chunks[k]].numel);
    }
    if (chunks.size() > 0 && request->min_version > 0) {
      recorder_.Record(EventKind::kPullReceived, request->min_version - 1, request->sent,
                       std::chrono::steady_clock::now(), static_cast<uint32_t>(p), chunks[0],
                       chunks.size());
    }
    if (consistency_.per_arrival() && chunks.size() > 0) {
      if (request->min_version != slowest_version_) {
        slowest_version_ = request->min_version;
        slowest_ = reply.getSlowest();
        own_steps_ = reply.getOwnSteps();
      } else {
        slowest_ = std::min<uint64_t>(slowest_, reply.getSlowest());
        own_steps_ = std::min<uint64_t>(own_steps_, reply.getOwnSteps());
      }
    }
    outstanding_.erase(request);
    return AdoptMembership(reply.getMembership(), min_version);
  });
}

Status WorkerClient::TakeHistory(const std::vector<MembershipChange>& history) {
  for (const MembershipChange& h : history) {
    for (int w : h.live) {
      if (w < 0) return Internal("membership history lists worker " + std::to_string(w));
      world_size_ = std::max(world_size_, w + 1);
    }
    if ((!h.shares.empty() && h.shares.size() != h.live.size()) ||
        std::find(h.shares.begin(), h.shares.end(), 0u) != h.shares.end()) {
      return Internal("membership history gives batch shares that do not match its workers");
    }
    for (const UnfinishedSteps& u : h.unfinished) {
      if (u.worker < 0 || u.from_step >= h.layout_step()) {
        return Internal("membership history names unfinished steps that do not match its change");
      }
    }
    if (h.data_step != 0 && (h.data_step < h.step || h.data_step - h.step > kMaxDataLookAhead)) {
      return Internal("membership history names a data step that does not match its change");
    }
    changes_.push_back(h);
    membership_epoch_ = h.epoch;
    live_workers_ = h.live;
    shares_ = h.shares;
  }
  return Status::Ok();
}

Result<WorkerClient::Slice> WorkerClient::SliceOf(uint64_t global_batch, uint64_t step) {
  const std::vector<int>* workers = &live_workers_;
  const std::vector<uint32_t>* shares = &shares_;
  for (const MembershipChange& c : changes_) {
    if (c.step > step) break;  // oldest first
    workers = &c.live;
    shares = &c.shares;
  }
  const auto at = std::find(workers->begin(), workers->end(), rank_);
  if (at == workers->end()) return FailedPrecondition("this worker does not train now");
  const int index = static_cast<int>(at - workers->begin());
  const uint64_t live = workers->size();
  Slice slice;
  if (shares->empty()) {
    if (global_batch % live != 0) {
      return InvalidArgument(fmt::format(
          "a global batch of {} samples does not split evenly over the {} live workers: pass "
          "live_count() * your per-worker batch",
          global_batch, live));
    }
    slice.count = global_batch / live;
    slice.offset = slice.count * static_cast<uint64_t>(index);
  } else {
    uint64_t sum = 0;
    for (size_t i = 0; i < shares->size(); ++i) {
      if (static_cast<int>(i) < index) slice.offset += (*shares)[i];
      sum += (*shares)[i];
    }
    if (sum != global_batch) {
      return InvalidArgument(fmt::format(
          "--dynamic-slicing: this step's shares sum to a global batch of {} samples, but {} "
          "was asked for: every worker must ask for the same global batch (live_count() * "
          "its per-worker batch)",
          sum, global_batch));
    }
    slice.count = (*shares)[index];
  }
  slice_count_ = slice.count;
  slice_global_ = global_batch;
  return slice;
}

int WorkerClient::live_index() const {
  for (size_t i = 0; i < live_workers_.size(); ++i) {
    if (live_workers_[i] == rank_) return static_cast<int>(i);
  }
  return -1;
}

Status WorkerClient::AdoptMembership(wire::Membership::Reader m, uint64_t version) {
  if (finished_) return Status::Ok();  // the final values' pull: the job went on without it
  Enforce(version);
  if (m.getEpoch() <= membership_epoch_) return Status::Ok();
  MembershipChange change;
  change.step = m.getEffectiveStep();
  change.epoch = m.getEpoch();
  for (int w : m.getLiveWorkers()) {
    if (w < 0) return Internal("membership lists worker " + std::to_string(w));
    change.live.push_back(w);
  }
  if (std::find(change.live.begin(), change.live.end(), rank_) == change.live.end()) {
    return Aborted("this worker was declared lost and the job went on without it");
  }
  for (uint32_t s : m.getBatchShares()) change.shares.push_back(s);
  if ((!change.shares.empty() && change.shares.size() != change.live.size()) ||
      std::find(change.shares.begin(), change.shares.end(), 0u) != change.shares.end()) {
    return Internal("membership gives batch shares that do not match its workers");
  }
  if (m.getUnfinished().size() > static_cast<size_t>(world_size_)) {
    return Internal("membership names more lost workers than were live");
  }
  change.unfinished = wire::UnfinishedFromWire(m.getUnfinished());
  change.data_step = m.getDataStep();
  if (change.data_step != 0 &&
      (change.data_step < change.step || change.data_step - change.step > kMaxDataLookAhead)) {
    return Internal("membership names a data step that does not match its change");
  }
  for (const UnfinishedSteps& u : change.unfinished) {
    if (u.worker < 0 || u.from_step >= change.layout_step()) {
      return Internal("membership names unfinished steps that do not match its change");
    }
  }
  membership_epoch_ = change.epoch;
  const MembershipChange* newest = !upcoming_.empty()  ? &upcoming_.back()
                                   : !changes_.empty() ? &changes_.back()
                                                       : nullptr;
  const bool same = newest ? change.live == newest->live && change.shares == newest->shares
                           : change.live == live_workers_ && change.shares == shares_;
  if (same) return Status::Ok();  // a round for an on-demand snapshot
  for (int w : change.live) world_size_ = std::max(world_size_, w + 1);  // a worker joined
  // Known now (known_changes(): the data drawn ahead for later steps follow it), in force
  // (membership_changes()) from its step.
  upcoming_.push_back(std::move(change));
  Enforce(version);
  return Status::Ok();
}

void WorkerClient::Enforce(uint64_t version) {
  while (!upcoming_.empty() && upcoming_.front().step <= version) {
    changes_.push_back(upcoming_.front());
    MembershipChange change = std::move(upcoming_.front());
    upcoming_.pop_front();
    if (change.live == live_workers_) {
      shares_ = std::move(change.shares);
      spdlog::debug(
          "from step {} this worker trains {} samples of each global batch", change.step,
          shares_.empty() ? std::string("an equal share") : std::to_string(shares_[live_index()]));
      continue;
    }
    std::string lost, joined;
    for (int w : live_workers_) {
      if (std::find(change.live.begin(), change.live.end(), w) == change.live.end())
        lost += (lost.empty() ? "" : ", ") + std::to_string(w);
    }
    for (int w : change.live) {
      if (std::find(live_workers_.begin(), live_workers_.end(), w) == live_workers_.end()) {
        joined += (joined.empty() ? "" : ", ") + std::to_string(w);
      }
    }
    live_workers_ = std::move(change.live);
    shares_ = std::move(change.shares);
    spdlog::warn(
        "{}{}{}: from step {} the {} live workers share the data{} (this worker takes part "
        "{} of {})",
        lost.empty() ? "" : "worker(s) " + lost + " left (finished or lost)",
        !lost.empty() && !joined.empty() ? ", " : "",
        joined.empty() ? "" : "worker(s) " + joined + " joined", change.step, live_workers_.size(),
        change.data_step > change.step ? fmt::format(" from step {}", change.data_step) : "",
        live_index() + 1, live_workers_.size());
  }
}

Status WorkerClient::Barrier() {
  // ssp: a worker waiting here takes no step; it must not hold the others
  // back (they may need it to move on before they reach the barrier).
  if (consistency_.kind == Consistency::Kind::kSsp) {
    for (size_t p = 0; p < ps_.size(); ++p) {
      EEN_RETURN_IF_ERROR(Send(
          p,
          worker_messages::Pull(
              {.epoch = map_.epoch(), .min_version = step_.load(), .worker = rank_, .parked = true},
              {}),
          fmt::format("telling PS {} this worker waits at a barrier", p)));
    }
  }
  const uint64_t sequence = ++barrier_sequence_;
  Status s = Request(
      worker_messages::Barrier(rank_, sequence, map_.epoch()),
      [&](wire::Header::Reader h) {
        return h.isBarrierReply() && h.getBarrierReply().getSequence() == sequence;
      },
      std::chrono::hours(24 * 365), "barrier " + std::to_string(sequence));
  // Sent back by a rollback: the coordinator forgot this arrival, and the
  // same barrier is asked for again once the steps are redone.
  if (s.code() == StatusCode::kStaleEpoch) --barrier_sequence_;
  return s;
}

Result<uint64_t> WorkerClient::ClaimBatch(uint64_t step, uint64_t not_before) {
  const uint64_t sequence = ++claim_sequence_;
  uint64_t index = 0;
  EEN_RETURN_IF_ERROR(Request(
      worker_messages::BatchClaim(rank_, sequence, step, not_before),
      [&](wire::Header::Reader h) {
        if (!h.isBatchClaimReply() || h.getBatchClaimReply().getSequence() != sequence) {
          return false;
        }
        index = h.getBatchClaimReply().getIndex();
        return true;
      },
      env_.failover_threshold * 10, "the next batch"));
  return index;
}

Status WorkerClient::Finish() {
  if (finished_) return Status::Ok();
  finished_ = true;
  Status s = Request(
      worker_messages::Done(rank_, step_.load()),
      [](wire::Header::Reader h) { return h.isDoneReply(); }, env_.failover_threshold * 10,
      "the end of the job");
  heartbeat_.reset();  // a finished worker stops its heartbeats
  return s;
}

Status WorkerClient::FinishAwaitingFinal(uint64_t steps) {
  if (finished_) return Status::Ok();
  finished_ = true;
  return Request(
      worker_messages::AwaitFinal(rank_, std::max(steps, step_.load())),
      [](wire::Header::Reader h) { return h.isDoneReply(); }, env_.failover_threshold * 10,
      "the end of the job");
}

Result<std::optional<uint64_t>> WorkerClient::AwaitFinal() {
  if (!heartbeat_) return std::optional<uint64_t>();
  const auto since = Clock::now();
  auto next_note = since + std::chrono::seconds(30);
  while (true) {
    if (const uint64_t step = heartbeat_->final_step(); step != UINT64_MAX) {
      return std::optional<uint64_t>(step);
    }
    const HeartbeatSender::State state = heartbeat_->state();
    if (state == HeartbeatSender::State::kShutdown) return std::optional<uint64_t>();
    EEN_RETURN_IF_ERROR(JobStatus());
    if (Clock::now() > next_note) {
      spdlog::info(
          "finished; waiting {} s so far for the others to finish (the job's final "
          "values come then; Finish(false) leaves at once)",
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - since).count());
      next_note += std::chrono::seconds(30);
    }
    std::this_thread::sleep_for(milliseconds(20));  // heartbeat replies bring the news
  }
}

Status WorkerClient::FinalTaken() {
  Status s = Request(
      worker_messages::FinalTaken(rank_), [](wire::Header::Reader h) { return h.isDoneReply(); },
      env_.failover_threshold * 10, "the end of the job");
  heartbeat_.reset();
  return s;
}

void WorkerClient::Abandon() {
  finished_ = true;  // the destructor says nothing either
  heartbeat_.reset();
}

void WorkerClient::EnterStep() { program_since_micros_ = 0; }
void WorkerClient::LeaveStep() { program_since_micros_ = std::max<int64_t>(SteadyMicros(), 1); }

void WorkerClient::ReportProgress(uint64_t step, std::optional<double> loss, uint64_t samples,
                                  uint64_t sync_micros, uint64_t compute_micros) {
  step_ = step;
  loss_ = loss.value_or(0.0);
  loss_given_ = loss.has_value();
  samples_ = samples;
  sync_micros_ = sync_micros;
  compute_micros_ = compute_micros;
  staleness_ = Staleness();
  reported_share_ = static_cast<uint32_t>(std::min<uint64_t>(slice_count_, UINT32_MAX));
  reported_global_ = static_cast<uint32_t>(std::min<uint64_t>(slice_global_, UINT32_MAX));
  MaybeProbe();
}

void WorkerClient::MaybeProbe() {
  const uint64_t round = heartbeat_ ? heartbeat_->probe_round() : 0;
  if (round == 0 || round == probed_round_) return;
  if (probe_thread_.joinable()) {
    // The last round's probe may still run: a later step looks again.
    bool finished = false;
    {
      std::lock_guard<std::mutex> lock(probe_mu_);
      finished = probe_finished_;
    }
    if (!finished) return;
    probe_thread_.join();
  }
  probed_round_ = round;
  probe_finished_ = false;
  std::vector<std::string> addresses;
  const std::string host = HostName();
  for (uint32_t p = 0; p < map_.num_ps(); ++p) addresses.push_back(map_.AddressFor(p, host));
  probe_thread_ = std::jthread([this, round, addresses, rank = rank_](std::stop_token stop) {
    std::vector<ProbeResult> results = Probe(stop, round, rank, addresses);
    std::lock_guard<std::mutex> lock(probe_mu_);
    probe_results_ = std::move(results);
    probe_finished_ = true;
  });
}

std::vector<WorkerClient::ProbeResult> WorkerClient::Probe(
    std::stop_token stop, uint64_t round, int rank, const std::vector<std::string>& addresses) {
  std::vector<ProbeResult> results;
  for (uint32_t p = 0; p < addresses.size() && !stop.stop_requested(); ++p) {
    auto device = transport::DeviceFor(addresses[p]);
    if (!device.ok()) continue;
    auto connection = (*device)->Connect(addresses[p]);
    if (!connection.ok()) continue;
    const auto start = std::chrono::steady_clock::now();
    bool sent = true;
    for (int k = 0; k < kProbeMessages && sent; ++k) {
      sent = (*connection)->Send(worker_messages::Probe(rank, round, kProbeMessageBytes)).ok();
    }
    int confirmed = 0;
    const auto deadline = start + std::chrono::seconds(5);
    while (sent && confirmed < kProbeMessages && !stop.stop_requested() &&
           std::chrono::steady_clock::now() < deadline) {
      auto reply = (*connection)->Receive(std::chrono::milliseconds(500));
      if (!reply.ok()) continue;
      bool refused = false;
      Ignored(wire::Visit(*reply,
                          [&](wire::Header::Reader h) {
                            refused = h.isError();
                            if (h.isProbeReply() && h.getProbeReply().getRound() == round) {
                              confirmed++;
                            }
                            return Status::Ok();
                          }),
              "reading a probe's answer");
      if (refused) break;
    }
    if (stop.stop_requested()) break;
    if (confirmed < kProbeMessages) {
      spdlog::warn("probe of ps {} ({}) unanswered: no figure for that link", p, addresses[p]);
      continue;
    }
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    results.push_back({round, p, uint64_t{kProbeMessageBytes} * kProbeMessages,
                       static_cast<uint64_t>(std::max<int64_t>(micros, 1))});
  }
  return results;
}

void WorkerClient::CountTraffic(size_t ps, uint64_t out, uint64_t in) {
  std::lock_guard<std::mutex> lock(traffic_mu_);
  if (traffic_.size() <= ps) traffic_.resize(ps + 1);
  traffic_[ps].out += out;
  traffic_[ps].in += in;
}

}  // namespace een
