// ShardMove: see shard_move.h.
#include "launcher/shard_move.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace een {

std::string PsList(const std::set<uint32_t>& ranks) {
  std::string text;
  for (uint32_t r : ranks) text += fmt::format("{}ps {}", text.empty() ? "" : ", ", r);
  return text.empty() ? "no PS" : text;
}

ShardMap ShardMove::Begin(const ShardMap& map, ShardMap::Moves moves, int leaving, uint64_t epoch,
                          const std::string& what) {
  uint64_t bytes = 0;
  std::set<uint32_t> to;
  const std::vector<uint64_t> shard_bytes = map.BytesPerShard();
  for (const auto& [shard, target] : moves) {
    bytes += shard_bytes[shard];
    to.insert(target);
  }
  ShardMap staged = map.Staged(moves, epoch);
  spdlog::info(
      "{}: {} shard(s), {} bytes of parameters, move to {}; first they are backed up "
      "there (shard map epoch {})",
      what, moves.size(), bytes, PsList(to), epoch);
  move_ = Move{std::move(moves), leaving, epoch, bytes};
  return staged;
}

std::optional<ShardMove::Done> ShardMove::Advance(const ShardMap& map, uint64_t map_epoch,
                                                  const std::vector<uint64_t>& chunks_ready,
                                                  int replicas, const std::vector<bool>& usable) {
  if (!move_) return std::nullopt;
  if (map_epoch != move_->staged_epoch) {  // a failover or rollback came first
    spdlog::warn("shard moves abandoned: the shard map changed meanwhile (epoch {})", map_epoch);
    move_.reset();
    return std::nullopt;
  }
  std::set<uint32_t> to;
  for (const auto& [shard, target] : move_->moves) {
    if (target >= chunks_ready.size() || chunks_ready[target] != move_->staged_epoch) {
      return std::nullopt;  // still receiving
    }
    to.insert(target);
  }
  const uint64_t epoch = map_epoch + 1;
  Done done{map.Moved(move_->moves, replicas, move_->leaving, usable, epoch), move_->leaving};
  spdlog::info(
      "shard moves done: {} shard(s) ({} bytes of parameters) now served by {} (shard "
      "map epoch {})",
      move_->moves.size(), move_->bytes, PsList(to), epoch);
  move_.reset();
  return done;
}

}  // namespace een
