// ParameterServer, replicas 2: keeping each chunk's backup in step, and
// following the coordinator's map changes (see parameter_server.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "common/logging.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "ps/parameter_server.h"
#include "ps/ps_messages.h"

namespace een::ps {

using transport::Frame;
using transport::Message;

namespace {

// One Replicate message: header plus a frame per chunk.
struct ReplicateBatch {
  std::vector<uint32_t> chunks;
  std::vector<uint64_t> versions;
  std::vector<Frame> frames;
  std::vector<double> lrs;             // mean gradients: each step's learning rate
  std::vector<double> norms;           // and the total norm it was clipped with (clipping only)
  std::vector<int32_t> workers;        // ssp/async means: whose gradient
  std::vector<uint64_t> worker_steps;  // and its step; images: steps per worker
};

Message EncodeReplicate(uint64_t epoch, int from, bool image, ReplicateBatch batch, bool answer) {
  return ps_messages::Replicate({.epoch = epoch, .from = from, .image = image, .answer = answer},
                                batch.chunks, batch.versions, batch.lrs, batch.norms,
                                std::move(batch.frames), batch.workers, batch.worker_steps);
}

// Sends each backup PS its batch: the step's mean gradients, or whole
// images (`image`) to build a new backup. A PS that cannot be reached is
// left to the coordinator, which moves the shards on.
void SendToBackups(std::map<uint32_t, ReplicateBatch> by_backup, uint64_t epoch, int from,
                   bool image, const std::function<transport::Connection*(uint32_t)>& peer) {
  for (auto& [backup, batch] : by_backup) {
    if (image) {
      size_t bytes = 0;
      for (const Frame& f : batch.frames) bytes += f.size();
      spdlog::info("building the backup of {} chunk(s) on ps {} ({} bytes)", batch.chunks.size(),
                   backup, bytes);
    }
    transport::Connection* connection = peer(backup);
    if (!connection) continue;
    if (Status s = connection->Send(EncodeReplicate(epoch, from, image, std::move(batch), false));
        !s.ok()) {
      spdlog::warn("could not {} ps {}: {}", image ? "send chunk images to" : "replicate to",
                   backup, s.ToString());
    }
  }
}

}  // namespace

transport::Connection* ParameterServer::Peer(uint32_t ps) {
  if (peers_.size() < map_.num_ps()) {
    peers_.resize(map_.num_ps());
    peer_addresses_.resize(map_.num_ps());
  }
  const std::string& address = map_.AddressFor(ps, HostName());
  if (!peers_[ps] || peer_addresses_[ps] != address) {  // first use, or a replacement PS
    auto device = transport::DeviceFor(address);
    if (!device.ok()) return nullptr;
    auto connection = (*device)->Connect(address);
    if (!connection.ok()) {
      spdlog::warn("cannot connect to ps {} at {}: {}", ps, address,
                   connection.status().ToString());
      return nullptr;
    }
    peers_[ps] = std::move(connection).value();
    peer_addresses_[ps] = address;
  }
  return peers_[ps].get();
}

void ParameterServer::ReplicateSteps(const std::vector<uint32_t>& completed) {
  if (!map_.replicated()) return;
  std::map<uint32_t, ReplicateBatch> by_backup;
  for (uint32_t c : completed) {
    const uint32_t backup = map_.BackupOfChunk(c);
    if (backup == ShardMap::kNoPs) continue;
    ReplicateBatch& batch = by_backup[backup];
    batch.chunks.push_back(c);
    batch.versions.push_back(store_->Version(c) - 1);  // the step this mean belongs to
    batch.frames.push_back(store_->MeanGradient(c));
    batch.lrs.push_back(store_->AppliedLr(c));
    if (store_->clipping()) batch.norms.push_back(store_->AppliedNorm(c));
    if (store_->consistency().per_arrival()) {
      batch.workers.push_back(store_->LastWorker(c));
      batch.worker_steps.push_back(store_->LastWorkerStep(c));
    }
  }
  SendToBackups(std::move(by_backup), epoch_, env_.rank, /*image=*/false,
                [this](uint32_t ps) { return Peer(ps); });
}

void ParameterServer::SendImages(const std::vector<uint32_t>& chunks) {
  if (!map_.replicated()) return;
  std::map<uint32_t, ReplicateBatch> by_backup;
  for (uint32_t c : chunks) {
    const uint32_t backup = map_.BackupOfChunk(c);
    if (backup == ShardMap::kNoPs || !store_->Owns(c) || !store_->Initialized(c)) continue;
    auto image = std::make_shared<ChunkImage>(store_->CaptureChunk(c));
    ReplicateBatch& batch = by_backup[backup];
    batch.chunks.push_back(c);
    batch.versions.push_back(image->version);
    batch.frames.push_back(
        Frame::Borrow(image->data.data(), image->data.size() * sizeof(float), image));
    batch.worker_steps.insert(batch.worker_steps.end(), image->worker_steps.begin(),
                              image->worker_steps.end());
    store_->SetAcked(c, -1);  // until the new backup confirms the image
  }
  SendToBackups(std::move(by_backup), epoch_, env_.rank, /*image=*/true,
                [this](uint32_t ps) { return Peer(ps); });
}

Status ParameterServer::HandleReplicate(wire::Replicate::Reader r, const Message& message) {
  const int from = r.getFrom();
  auto chunks = r.getChunks();
  auto versions = r.getVersions();
  auto lrs = r.getLrs();
  auto norms = r.getNorms();
  auto workers = r.getWorkers();
  auto worker_steps = r.getWorkerSteps();
  const bool per_arrival = store_->consistency().per_arrival();
  // ssp/async: a mean names its worker and step; an image its steps per worker.
  const size_t steps_per_chunk = !per_arrival   ? 0
                                 : r.getImage() ? size_t(store_->num_workers())
                                                : 1;
  if (chunks.size() != versions.size() || chunks.size() != message.payload_count() ||
      (lrs.size() != 0 && lrs.size() != chunks.size()) ||
      (norms.size() != 0 && norms.size() != chunks.size()) ||
      (per_arrival && !r.getImage() && workers.size() != chunks.size()) ||
      worker_steps.size() != chunks.size() * steps_per_chunk) {
    return InvalidArgument("replicate lists " + std::to_string(chunks.size()) + " chunks, " +
                           std::to_string(versions.size()) + " versions and " +
                           std::to_string(message.payload_count()) + " frames");
  }
  for (uint32_t c : chunks) {
    if (!store_->BacksUp(c) || map_.OwnerOfChunk(c) != static_cast<uint32_t>(from)) {
      return FailedPrecondition("ps " + std::to_string(from) + " replicated chunk " +
                                std::to_string(c) +
                                ", which this PS does not back up for it "
                                "(a stale primary?)");
    }
  }
  ReplicateBatch answer;
  for (uint32_t i = 0; i < chunks.size(); ++i) {
    const uint32_t c = chunks[i];
    const Frame& payload = message.payload(i);
    if (r.getImage()) {
      ChunkImage image{c, versions[i], std::vector<float>(payload.size() / sizeof(float)), {}};
      std::memcpy(image.data.data(), payload.data(), image.data.size() * sizeof(float));
      for (size_t w = 0; w < steps_per_chunk; ++w) {
        image.worker_steps.push_back(worker_steps[i * steps_per_chunk + w]);
      }
      EEN_RETURN_IF_ERROR(store_->LoadImage(image));
    } else {
      const double lr = lrs.size() ? lrs[i] : -1;
      if (!std::isfinite(lr) || lr < 0)
        return InvalidArgument("replicated learning rate out of range");
      const double norm = norms.size() ? norms[i] : -1;
      if (std::isnan(norm) || std::isinf(norm))
        return InvalidArgument("replicated norm out of range");
      const int worker = per_arrival ? workers[i] : -1;
      const uint64_t worker_step = per_arrival ? worker_steps[i] : 0;
      EEN_ASSIGN_OR_RETURN(bool applied, store_->ApplyReplica(c, versions[i], payload, lr, norm,
                                                              worker, worker_step));
      (void)applied;  // a repeat is confirmed all the same
    }
    answer.chunks.push_back(c);
    answer.versions.push_back(store_->Version(c));
  }
  step_ = std::max<uint64_t>(step_.load(), store_->MinVersion());
  NoteChunksReady();
  MaybeSnapshot();  // before confirming: the primary cannot move these chunks on yet
  transport::Connection* peer = Peer(static_cast<uint32_t>(from));
  if (!peer) return Unavailable("cannot reach ps " + std::to_string(from) + " to confirm");
  return peer->Send(EncodeReplicate(epoch_, env_.rank, r.getImage(), std::move(answer), true));
}

Status ParameterServer::HandleReplicated(wire::Replicate::Reader r) {
  auto chunks = r.getChunks();
  auto versions = r.getVersions();
  if (chunks.size() != versions.size())
    return InvalidArgument("replicated: lists differ in length");
  for (uint32_t i = 0; i < chunks.size(); ++i) {
    const uint32_t c = chunks[i];
    if (!store_->Owns(c) || map_.BackupOfChunk(c) != static_cast<uint32_t>(r.getFrom())) continue;
    store_->SetAcked(c, std::max<int64_t>(store_->Acked(c), static_cast<int64_t>(versions[i])));
    if (versions[i] > 0) {
      recorder_.Record(EventKind::kReplicated, versions[i] - 1, std::chrono::steady_clock::now(),
                       c);
    }
  }
  AnswerReadyPulls();
  return Status::Ok();
}

void ParameterServer::TrustBackups() {
  for (uint32_t c : map_.ChunksOwnedBy(env_.rank)) {
    if (store_->Initialized(c)) store_->SetAcked(c, static_cast<int64_t>(store_->Version(c)));
  }
}

Status ParameterServer::AdoptMap(ShardMap next) {
  if (next.epoch() <= epoch_) return Status::Ok();  // a repeat
  const ShardMap previous = map_;
  EEN_ASSIGN_OR_RETURN(ChunkStore::Adoption adoption, store_->Adopt(next, env_.rank));
  map_ = std::move(next);
  epoch_ = map_.epoch();
  DropPendingRequests();  // asked under the old map: the workers ask again
  // Primary chunks whose backup is new (another PS, or a replacement
  // process at the same index) get a whole image.
  std::vector<uint32_t> rebuild;
  for (uint32_t c : map_.ChunksOwnedBy(env_.rank)) {
    const uint32_t backup = map_.BackupOfChunk(c);
    if (backup == ShardMap::kNoPs) continue;
    const bool same = previous.OwnerOfChunk(c) == static_cast<uint32_t>(env_.rank) &&
                      previous.BackupOfChunk(c) == backup &&
                      previous.ps_addresses()[backup] == map_.ps_addresses()[backup];
    if (!same) rebuild.push_back(c);
  }
  spdlog::warn(
      "shard map epoch {}: {} chunk(s) promoted to primary here, {} new backup chunk(s) "
      "to receive, {} backup(s) to build elsewhere",
      epoch_, adoption.promoted.size(), adoption.new_backups.size(), rebuild.size());
  SendImages(rebuild);
  NoteChunksReady();
  ReplayFutureMessages();
  step_ = std::max<uint64_t>(step_.load(), store_->MinVersion());
  return Status::Ok();
}

void ParameterServer::ReplayFutureMessages() {
  std::deque<transport::Envelope> waiting;
  waiting.swap(future_);
  future_bytes_ = 0;
  for (const transport::Envelope& e : waiting) Handle(e);  // still-future ones queue again
}

}  // namespace een::ps
