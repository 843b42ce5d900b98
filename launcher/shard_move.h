// ShardMove: the coordinator's protocol for moving shards while training
// goes on (a PS joins with the next rank and takes its share, or a PS is
// drained and hands all of its shards over).
//
// Two shard map epochs. Begin() stages the moves: each moved shard's new
// owner becomes its backup, receives an image of it and is kept in step.
// Each PS says in its heartbeats the map epoch whose chunks it all holds;
// once every receiver holds the staged epoch, Advance() hands ownership
// over (the next epoch; a leaving PS is then told to go). A failover or
// rollback that changes the map meanwhile abandons the moves. One move at
// a time.
// Thread safety: none; the coordinator's thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/shard_map.h"

namespace een {

// "ps 1, ps 3" ("no PS" for none), for log lines.
std::string PsList(const std::set<uint32_t>& ranks);

class ShardMove {
 public:
  bool active() const { return move_.has_value(); }

  // Stages `moves` on `map` under `epoch` (the next map epoch) and returns
  // the staged map; `leaving`: the PS being drained, or -1. `what` says
  // why, for the log.
  ShardMap Begin(const ShardMap& map, ShardMap::Moves moves, int leaving, uint64_t epoch,
                 const std::string& what);

  struct Done {
    ShardMap map;      // the receivers own the moved shards (the next epoch)
    int leaving = -1;  // the PS that leaves now, or -1
  };
  // With the map now at `map_epoch` and each PS holding every chunk of
  // map epoch `chunks_ready[ps]`: the moves' end, once every receiver holds
  // the staged epoch (nullopt: not yet, none under way, or abandoned
  // because the map changed meanwhile). `usable`: the PS that may hold
  // backups; `replicas`: the job's.
  std::optional<Done> Advance(const ShardMap& map, uint64_t map_epoch,
                              const std::vector<uint64_t>& chunks_ready, int replicas,
                              const std::vector<bool>& usable);

 private:
  struct Move {
    ShardMap::Moves moves;  // virtual shard -> new owner
    int leaving = -1;
    uint64_t staged_epoch = 0;
    uint64_t bytes = 0;  // parameter bytes that move (images add optimizer state)
  };
  std::optional<Move> move_;
};

}  // namespace een
