#include "common/shard_map.h"

#include <algorithm>
#include <numeric>
#include <queue>

namespace een {
namespace {

constexpr uint64_t kMinChunkNumel =
    4096;  // 16 KiB: below this, messages cost more than balance gains

// Assigns items (by weight) to `bins` bins: heaviest item first onto the
// lightest bin, ties broken by index so the result is deterministic.
std::vector<uint32_t> GreedyBalance(const std::vector<uint64_t>& weights, uint32_t bins) {
  std::vector<uint32_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return weights[a] > weights[b]; });
  using Load = std::pair<uint64_t, uint32_t>;  // (bytes, bin)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> lightest;
  for (uint32_t b = 0; b < bins; ++b) lightest.push({0, b});
  std::vector<uint32_t> bin_of(weights.size());
  for (uint32_t item : order) {
    auto [load, bin] = lightest.top();
    lightest.pop();
    bin_of[item] = bin;
    lightest.push({load + weights[item], bin});
  }
  return bin_of;
}

// Shard indices, heaviest first (ties by index: deterministic).
std::vector<uint32_t> HeaviestFirst(const std::vector<uint64_t>& shard_bytes) {
  std::vector<uint32_t> order(shard_bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return shard_bytes[a] > shard_bytes[b]; });
  return order;
}

}  // namespace

Result<ShardMap> ShardMap::Build(std::vector<TensorInfo> tensors, uint32_t num_ps,
                                 const ShardingOptions& options,
                                 std::vector<std::string> ps_addresses, uint64_t epoch,
                                 std::vector<std::string> ps_hosts) {
  if (num_ps == 0) return InvalidArgument("a shard map needs at least one PS");
  if (ps_addresses.size() != num_ps) {
    return InvalidArgument("shard map for " + std::to_string(num_ps) + " PS got " +
                           std::to_string(ps_addresses.size()) + " addresses");
  }
  if (options.max_chunk_numel == 0 || options.shards_per_ps == 0) {
    return InvalidArgument("max_chunk_numel and shards_per_ps must be positive");
  }
  ShardMap map;
  map.epoch_ = epoch;
  map.tensors_ = std::move(tensors);
  map.ps_addresses_ = std::move(ps_addresses);
  map.ps_hosts_ = std::move(ps_hosts);
  // Small models get smaller chunks, so that they too spread evenly.
  uint64_t total = 0;
  for (const TensorInfo& t : map.tensors_) total += t.numel;
  const uint64_t max_chunk = std::min<uint64_t>(
      options.max_chunk_numel, std::max<uint64_t>(kMinChunkNumel, total / (num_ps * 8) + 1));
  for (uint32_t t = 0; t < map.tensors_.size(); ++t) {
    const uint64_t numel = map.tensors_[t].numel;
    if (numel == 0) return InvalidArgument("tensor '" + map.tensors_[t].name + "' is empty");
    const uint64_t pieces = (numel + max_chunk - 1) / max_chunk;
    for (uint64_t i = 0; i < pieces; ++i) {
      const uint64_t begin = numel * i / pieces;
      const uint64_t end = numel * (i + 1) / pieces;
      map.chunks_.push_back(Chunk{t, begin, static_cast<uint32_t>(end - begin), 0});
    }
  }
  const uint32_t shards = num_ps * options.shards_per_ps;
  std::vector<uint64_t> chunk_bytes;
  for (const Chunk& c : map.chunks_) chunk_bytes.push_back(c.numel * uint64_t{4});
  std::vector<uint32_t> shard_of = GreedyBalance(chunk_bytes, shards);
  std::vector<uint64_t> shard_bytes(shards, 0);
  for (size_t i = 0; i < map.chunks_.size(); ++i) {
    map.chunks_[i].shard = shard_of[i];
    shard_bytes[shard_of[i]] += chunk_bytes[i];
  }
  map.shard_owner_ = GreedyBalance(shard_bytes, num_ps);
  map.IndexChunks();
  if (options.replicas > 2) return InvalidArgument("at most 2 replicas of a shard are supported");
  if (options.replicas == 2) {
    if (num_ps < 2) return InvalidArgument("2 replicas of each shard need at least 2 PS");
    map.shard_backup_.assign(shards, kNoPs);
    map.AssignMissingBackups(std::vector<bool>(num_ps, true));
    map.backup_since_.assign(shards, epoch);
  }
  return map;
}

void ShardMap::AssignMissingBackups(const std::vector<bool>& usable) {
  if (shard_backup_.empty()) return;
  const std::vector<uint64_t> shard_bytes = BytesPerShard();
  std::vector<uint64_t> held(num_ps(), 0);
  // Whether a usable PS on another host than `owner` exists.
  auto elsewhere = [&](uint32_t owner) {
    for (uint32_t p = 0; p < num_ps(); ++p) {
      if (usable[p] && p != owner && !SameHost(p, owner)) return true;
    }
    return false;
  };
  auto good_backup = [&](uint32_t s) {
    const uint32_t b = shard_backup_[s];
    const uint32_t owner = shard_owner_[s];
    return b != kNoPs && b < num_ps() && usable[b] && b != owner &&
           (!SameHost(b, owner) || !elsewhere(owner));
  };
  for (uint32_t s = 0; s < shard_owner_.size(); ++s) {
    held[shard_owner_[s]] += shard_bytes[s];
    if (good_backup(s)) held[shard_backup_[s]] += shard_bytes[s];
  }
  for (uint32_t s : HeaviestFirst(shard_bytes)) {
    if (good_backup(s)) continue;
    const uint32_t owner = shard_owner_[s];
    const bool other_host = elsewhere(owner);
    uint32_t best = kNoPs;
    for (uint32_t p = 0; p < num_ps(); ++p) {
      if (!usable[p] || p == owner || (other_host && SameHost(p, owner))) continue;
      if (best == kNoPs || held[p] < held[best]) best = p;
    }
    shard_backup_[s] = best;
    if (best != kNoPs) held[best] += shard_bytes[s];
  }
}

void ShardMap::NoteBackupChanges(const ShardMap& before) {
  backup_since_.assign(shard_backup_.size(), epoch_);
  for (uint32_t s = 0; s < shard_backup_.size(); ++s) {
    if (s < before.shard_backup_.size() && before.shard_backup_[s] == shard_backup_[s]) {
      backup_since_[s] = before.BackupSince(s);
    }
  }
}

Result<ShardMap> ShardMap::AfterLoss(uint32_t lost, const std::vector<bool>& usable,
                                     uint64_t epoch) const {
  ShardMap next = *this;
  next.epoch_ = epoch;
  for (uint32_t s = 0; s < shard_owner_.size(); ++s) {
    if (shard_owner_[s] != lost) continue;
    const uint32_t backup = BackupOfShard(s);
    if (backup == kNoPs || backup == lost || !usable[backup]) {
      return FailedPrecondition("virtual shard " + std::to_string(s) + " of ps " +
                                std::to_string(lost) + " has no live backup");
    }
    next.shard_owner_[s] = backup;
    next.shard_backup_[s] = kNoPs;
  }
  std::vector<bool> still = usable;
  still[lost] = false;
  next.AssignMissingBackups(still);
  next.NoteBackupChanges(*this);
  return next;
}

ShardMap ShardMap::WithPs(uint32_t ps, const std::string& address, const std::vector<bool>& usable,
                          uint64_t epoch) const {
  ShardMap next = *this;
  next.epoch_ = epoch;
  next.ps_addresses_[ps] = address;
  std::vector<bool> now = usable;
  now[ps] = true;
  next.AssignMissingBackups(now);
  next.NoteBackupChanges(*this);
  return next;
}

std::vector<uint64_t> ShardMap::BytesPerShard() const {
  std::vector<uint64_t> bytes(shard_owner_.size(), 0);
  for (const Chunk& c : chunks_) bytes[c.shard] += c.numel * uint64_t{4};
  return bytes;
}

uint64_t ShardMap::ShardBytes(uint32_t shard) const { return BytesPerShard()[shard]; }

ShardMap ShardMap::WithNewPs(const std::string& address, uint64_t epoch) const {
  ShardMap next = *this;
  next.epoch_ = epoch;
  next.ps_addresses_.push_back(address);
  if (!next.local_routes_.empty()) next.local_routes_.emplace_back();
  next.NoteBackupChanges(*this);
  return next;
}

ShardMap::Moves ShardMap::MovesOnto(uint32_t to, const std::vector<bool>& usable) const {
  const std::vector<uint64_t> shard_bytes = BytesPerShard();
  std::vector<uint64_t> load(num_ps(), 0);
  uint64_t total = 0;
  size_t live = 0;
  for (uint32_t s = 0; s < shard_owner_.size(); ++s) {
    load[shard_owner_[s]] += shard_bytes[s];
    total += shard_bytes[s];
  }
  for (uint32_t p = 0; p < num_ps(); ++p) live += (usable[p] || p == to) ? 1 : 0;
  const uint64_t share = live ? total / live : 0;
  Moves moves;
  for (uint32_t s : HeaviestFirst(shard_bytes)) {  // largest first, while it helps
    const uint32_t from = shard_owner_[s];
    if (from == to || shard_bytes[s] == 0 || load[to] >= share) continue;
    if (load[to] + shard_bytes[s] > load[from]) continue;  // would not even things out
    moves[s] = to;
    load[to] += shard_bytes[s];
    load[from] -= shard_bytes[s];
  }
  return moves;
}

ShardMap::Moves ShardMap::MovesOff(uint32_t from, const std::vector<bool>& usable) const {
  const std::vector<uint64_t> shard_bytes = BytesPerShard();
  std::vector<uint64_t> load(num_ps(), 0);
  for (uint32_t s = 0; s < shard_owner_.size(); ++s) load[shard_owner_[s]] += shard_bytes[s];
  Moves moves;
  for (uint32_t s : HeaviestFirst(shard_bytes)) {
    if (shard_owner_[s] != from) continue;
    uint32_t best = kNoPs;
    for (uint32_t p = 0; p < num_ps(); ++p) {
      if (p == from || !usable[p]) continue;
      if (best == kNoPs || load[p] < load[best]) best = p;
    }
    if (best == kNoPs) return {};  // nowhere to go
    moves[s] = best;
    load[best] += shard_bytes[s];
  }
  return moves;
}

ShardMap ShardMap::Staged(const Moves& moves, uint64_t epoch) const {
  ShardMap next = *this;
  next.epoch_ = epoch;
  if (next.shard_backup_.empty()) next.shard_backup_.assign(shard_owner_.size(), kNoPs);
  for (const auto& [shard, to] : moves) next.shard_backup_[shard] = to;
  next.NoteBackupChanges(*this);
  return next;
}

ShardMap ShardMap::Moved(const Moves& moves, int replicas, int leaving,
                         const std::vector<bool>& usable, uint64_t epoch) const {
  ShardMap next = *this;
  next.epoch_ = epoch;
  for (const auto& [shard, to] : moves) {
    const uint32_t from = shard_owner_[shard];
    next.shard_owner_[shard] = to;
    next.shard_backup_[shard] = replicas >= 2 && static_cast<int>(from) != leaving ? from : kNoPs;
  }
  if (replicas < 2) {
    next.shard_backup_.clear();
    next.NoteBackupChanges(*this);
    return next;
  }
  for (uint32_t s = 0; s < next.shard_backup_.size(); ++s) {
    if (static_cast<int>(next.shard_backup_[s]) == leaving) next.shard_backup_[s] = kNoPs;
  }
  std::vector<bool> staying = usable;
  if (leaving >= 0) staying[leaving] = false;
  next.AssignMissingBackups(staying);
  next.NoteBackupChanges(*this);
  return next;
}

Result<ShardMap> ShardMap::WithAddresses(std::vector<std::string> addresses, uint64_t epoch) const {
  if (addresses.size() != ps_addresses_.size()) {
    return InvalidArgument("shard map for " + std::to_string(num_ps()) + " PS got " +
                           std::to_string(addresses.size()) + " addresses");
  }
  ShardMap next = *this;
  next.ps_addresses_ = std::move(addresses);
  next.epoch_ = epoch;
  return next;
}

std::vector<uint32_t> ShardMap::ChunksHeldBy(uint32_t ps) const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < chunks_.size(); ++i) {
    if (OwnerOfChunk(i) == ps || BackupOfChunk(i) == ps) out.push_back(i);
  }
  return out;
}

const char* TensorKindName(TensorKind k) {
  switch (k) {
    case TensorKind::kParameter:
      return "parameter";
    case TensorKind::kBufferBroadcast:
      return "buffer (broadcast)";
    case TensorKind::kBufferAverage:
      return "buffer (averaged)";
    case TensorKind::kFrozen:
      return "frozen parameter";
  }
  return "?";
}

Result<TensorInfo> TensorFromWire(wire::TensorSpec::Reader t) {
  const auto kind = static_cast<uint16_t>(t.getKind());
  if (kind > static_cast<uint16_t>(TensorKind::kFrozen)) {
    return InvalidArgument("tensor '" + std::string(t.getName().cStr()) + "' has kind " +
                           std::to_string(kind) + ", which no EEN version defines");
  }
  TensorInfo info{t.getName(), t.getNumel(), static_cast<TensorKind>(kind), {}};
  for (int64_t d : t.getShape()) info.shape.push_back(d);
  return info;
}

void TensorToWire(const TensorInfo& tensor, wire::TensorSpec::Builder b) {
  b.setName(tensor.name);
  b.setNumel(tensor.numel);
  b.setKind(static_cast<wire::TensorKind>(tensor.kind));
  auto shape = b.initShape(tensor.shape.size());
  for (size_t i = 0; i < tensor.shape.size(); ++i) shape.set(i, tensor.shape[i]);
}

Result<std::vector<TensorInfo>> TensorsFromWire(capnp::List<wire::TensorSpec>::Reader list) {
  std::vector<TensorInfo> tensors;
  for (auto t : list) {
    EEN_ASSIGN_OR_RETURN(TensorInfo info, TensorFromWire(t));
    tensors.push_back(std::move(info));
  }
  return tensors;
}

void TensorsToWire(const std::vector<TensorInfo>& tensors,
                   capnp::List<wire::TensorSpec>::Builder list) {
  for (size_t i = 0; i < tensors.size(); ++i) TensorToWire(tensors[i], list[i]);
}

void ShardMap::IndexChunks() {
  first_chunk_.assign(tensors_.size() + 1, 0);
  for (const Chunk& c : chunks_) first_chunk_[c.tensor + 1]++;
  for (size_t t = 0; t < tensors_.size(); ++t) first_chunk_[t + 1] += first_chunk_[t];
}

Result<ShardMap> ShardMap::FromWire(wire::ShardMap::Reader reader) {
  ShardMap map;
  map.epoch_ = reader.getEpoch();
  EEN_ASSIGN_OR_RETURN(map.tensors_, TensorsFromWire(reader.getTensors()));
  for (auto a : reader.getPsAddresses()) map.ps_addresses_.push_back(a);
  for (auto r : reader.getPsLocalRoutes())
    map.local_routes_.push_back({r.getHost(), r.getAddress()});
  if (!map.local_routes_.empty() && map.local_routes_.size() != map.ps_addresses_.size()) {
    return InvalidArgument("shard map: same-host routes for some PS only");
  }
  for (auto o : reader.getShardOwner()) {
    if (o >= map.ps_addresses_.size()) return InvalidArgument("shard map: owner out of range");
    map.shard_owner_.push_back(o);
  }
  for (auto b : reader.getShardBackup()) {
    if (b != kNoPs && b >= map.ps_addresses_.size()) {
      return InvalidArgument("shard map: backup out of range");
    }
    map.shard_backup_.push_back(b);
  }
  if (!map.shard_backup_.empty() && map.shard_backup_.size() != map.shard_owner_.size()) {
    return InvalidArgument("shard map: backups for some shards only");
  }
  for (size_t s = 0; s < map.shard_backup_.size(); ++s) {
    if (map.shard_backup_[s] == map.shard_owner_[s]) {
      return InvalidArgument("shard map: shard " + std::to_string(s) + " backed up by its owner");
    }
  }
  // Chunks must tile each tensor exactly, in order.
  uint32_t tensor = 0;
  uint64_t next = 0;
  for (auto c : reader.getChunks()) {
    if (c.getTensor() >= map.tensors_.size() || c.getShard() >= map.shard_owner_.size() ||
        c.getNumel() == 0) {
      return InvalidArgument("shard map: chunk with tensor, shard or size out of range");
    }
    if (c.getTensor() != tensor) {
      if (c.getTensor() != tensor + 1 || next != map.tensors_[tensor].numel) {
        return InvalidArgument("shard map: chunks do not tile tensor " + std::to_string(tensor));
      }
      tensor = c.getTensor();
      next = 0;
    }
    if (c.getOffset() != next) return InvalidArgument("shard map: chunk offsets have a gap");
    next += c.getNumel();
    map.chunks_.push_back(Chunk{c.getTensor(), c.getOffset(), c.getNumel(), c.getShard()});
  }
  if (!map.tensors_.empty() &&
      (tensor + 1 != map.tensors_.size() || next != map.tensors_.back().numel)) {
    return InvalidArgument("shard map: chunks do not cover every tensor");
  }
  map.IndexChunks();
  return map;
}

void ShardMap::ToWire(wire::ShardMap::Builder b) const {
  b.setEpoch(epoch_);
  TensorsToWire(tensors_, b.initTensors(tensors_.size()));
  auto cs = b.initChunks(chunks_.size());
  for (size_t i = 0; i < chunks_.size(); ++i) {
    cs[i].setTensor(chunks_[i].tensor);
    cs[i].setOffset(chunks_[i].offset);
    cs[i].setNumel(chunks_[i].numel);
    cs[i].setShard(chunks_[i].shard);
  }
  auto os = b.initShardOwner(shard_owner_.size());
  for (size_t i = 0; i < shard_owner_.size(); ++i) os.set(i, shard_owner_[i]);
  auto bs = b.initShardBackup(shard_backup_.size());
  for (size_t i = 0; i < shard_backup_.size(); ++i) bs.set(i, shard_backup_[i]);
  auto as = b.initPsAddresses(ps_addresses_.size());
  for (size_t i = 0; i < ps_addresses_.size(); ++i) as.set(i, ps_addresses_[i]);
  auto rs = b.initPsLocalRoutes(local_routes_.size());
  for (size_t i = 0; i < local_routes_.size(); ++i) {
    rs[i].setHost(local_routes_[i].host);
    rs[i].setAddress(local_routes_[i].address);
  }
}

const std::string& ShardMap::AddressFor(uint32_t ps, const std::string& host) const {
  if (ps < local_routes_.size() && !local_routes_[ps].address.empty() &&
      !local_routes_[ps].host.empty() && local_routes_[ps].host == host) {
    return local_routes_[ps].address;
  }
  return ps_addresses_[ps];
}

std::vector<uint32_t> ShardMap::ChunksOwnedBy(uint32_t ps) const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < chunks_.size(); ++i) {
    if (OwnerOfChunk(i) == ps) out.push_back(i);
  }
  return out;
}

std::vector<uint64_t> ShardMap::BytesPerPs(size_t bytes_per_element) const {
  std::vector<uint64_t> bytes(num_ps(), 0);
  for (uint32_t i = 0; i < chunks_.size(); ++i) {
    bytes[OwnerOfChunk(i)] += chunks_[i].numel * bytes_per_element;
  }
  return bytes;
}

uint64_t ShardMap::TotalNumel() const {
  uint64_t n = 0;
  for (const TensorInfo& t : tensors_) n += t.numel;
  return n;
}

}  // namespace een
