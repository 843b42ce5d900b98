// Coordinator: a PS joins the running job, or is drained: the shards move
// (ShardMove, shard_move.h) while training goes on. See coordinator.h.
#include <fmt/format.h>

#include <algorithm>

#include "common/logging.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"
#include "launcher/coordinator_messages.h"

namespace een {

using transport::Message;

Status Coordinator::AddPs(const Process& process) {
  if (moves_.active() || rollback_.active() || !map_) {
    return Unavailable("shards are moving or rolling back already; start the PS again later");
  }
  Node n;
  n.role = wire::Role::PS;
  n.rank = static_cast<int>(ps_.size());
  n.Take(process, Clock::now());
  n.registered = true;
  if (n.data_address.empty()) return InvalidArgument("a PS must give its data address");
  ps_.push_back(n);
  map_ = map_->WithNewPs(n.data_address, map_epoch_);
  RefreshPsHosts();
  spdlog::info("{} joins the running job: the job grows to {} PS", Describe(ps_.back()),
               ps_.size());
  StartMoves(map_->MovesOnto(n.rank, UsablePs()), -1,
             fmt::format("balancing onto the new ps {}", n.rank));
  EEN_RETURN_IF_ERROR(SendJobStart(ps_.back(), /*rebuild=*/true));
  PsChanged();
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
  if (moves_.active() || rollback_.active())
    return refuse("shards are moving or rolling back already; try later");
  std::vector<bool> usable = UsablePs();
  usable[rank] = false;
  if (std::find(usable.begin(), usable.end(), true) == usable.end()) {
    return refuse("it is the only PS left");
  }
  ShardMap::Moves moves = map_->MovesOff(rank, usable);
  std::set<uint32_t> to;
  for (const auto& [shard, target] : moves) to.insert(target);
  EEN_RETURN_IF_ERROR(listener_->Send(
      peer, coordinator_messages::DrainReply(fmt::format(
                "draining ps {}: {} shard(s) move to {}; it leaves once they are served there",
                rank, moves.size(), PsList(to)))));
  StartMoves(std::move(moves), rank, fmt::format("draining ps {}", rank));
  return Status::Ok();
}

void Coordinator::StartMoves(ShardMap::Moves moves, int leaving, const std::string& what) {
  map_epoch_++;
  RefreshPsHosts();
  map_ = moves_.Begin(*map_, std::move(moves), leaving, map_epoch_, what);
  map_moved_ = true;
  SendMapChange();
  SaveState();
  MaybeFinishMoves();  // nothing to copy: done at once
}

std::vector<uint64_t> Coordinator::ChunksReady() const {
  std::vector<uint64_t> ready;
  for (const Node& p : ps_) ready.push_back(p.chunks_ready);
  return ready;
}

void Coordinator::MaybeSayBackupsBuilt() {
  if (!map_ || !map_->replicated() || backups_said_for_ == map_epoch_) return;
  const std::vector<bool> usable = UsablePs();
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (p < usable.size() && usable[p] && ps_[p].chunks_ready < map_epoch_) return;
  }
  backups_said_for_ = map_epoch_;
  spdlog::info(
      "every shard has a live backup (shard map epoch {}): a PS lost from now on loses nothing",
      map_epoch_);
}

void Coordinator::MaybeFinishMoves() {
  if (!moves_.active()) return;
  std::optional<ShardMove::Done> done =
      moves_.Advance(*map_, map_epoch_, ChunksReady(), options_.job.replicas, UsablePs());
  if (!done) return;
  map_epoch_++;
  map_ = std::move(done->map);
  if (done->leaving >= 0) {
    Node& gone = ps_[done->leaving];
    gone.drained = true;
    gone.done = true;
    spdlog::info("{} is drained and leaves", Describe(gone));
  }
  SendMapChange();
  SaveState();
  if (done->leaving >= 0) PsChanged();  // a pending round waits for the one that leaves
}

}  // namespace een
