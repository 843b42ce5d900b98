// Coordinator: moving shards while training goes on (a PS joins, a PS is
// drained). See coordinator.h.
#include <fmt/format.h>

#include <algorithm>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"

namespace een {

using transport::Message;

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
  n.liveness.Restart(Clock::now());
  if (n.data_address.empty()) return InvalidArgument("a PS must give its data address");
  ps_.push_back(n);
  map_ = map_->WithNewPs(n.data_address, map_epoch_);
  spdlog::info("{} joins the running job: the job grows to {} PS", Describe(ps_.back()),
               ps_.size());
  StartMoves(map_->MovesOnto(n.rank, UsablePs()), -1,
             fmt::format("balancing onto the new ps {}", n.rank));
  EEN_RETURN_IF_ERROR(SendJobStart(ps_.back(), /*rebuild=*/true));
  return Status::Ok();
}

Status Coordinator::HandleDrain(const transport::PeerId& peer, int rank) {
  auto refuse = [&](const std::string& why) {
    Ignored(listener_->Send(
                peer, wire::MakeError(wire::ErrorCode::FAILED_PRECONDITION,
                                      "cannot drain ps " + std::to_string(rank) + ": " + why)),
            "refusing a drain");
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
  wire::Outgoing b;
  b.header().setDrainReply(
      fmt::format("draining ps {}: {} shard(s) move to {}; it leaves once they are served there",
                  rank, moves.size(), PsList(to)));
  EEN_RETURN_IF_ERROR(listener_->Send(peer, b.Take()));
  StartMoves(std::move(moves), rank, fmt::format("draining ps {}", rank));
  return Status::Ok();
}

void Coordinator::StartMoves(ShardMap::Moves moves, int leaving, const std::string& what) {
  uint64_t bytes = 0;
  std::set<uint32_t> to;
  const std::vector<uint64_t> shard_bytes = map_->BytesPerShard();
  for (const auto& [shard, target] : moves) {
    bytes += shard_bytes[shard];
    to.insert(target);
  }
  map_epoch_++;
  map_ = map_->Staged(moves, map_epoch_);
  map_moved_ = true;
  moves_ = ShardMoves{std::move(moves), leaving, map_epoch_, bytes};
  spdlog::info(
      "{}: {} shard(s), {} bytes of parameters, move to {}; first they are backed up "
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
  spdlog::info(
      "shard moves done: {} shard(s) ({} bytes of parameters) now served by {} (shard "
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

}  // namespace een
