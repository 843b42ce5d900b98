// ShardMap: where every piece of every parameter tensor lives.
//
// Tensors are cut into chunks of at most `max_chunk_numel` elements (equal
// pieces, so no tiny tail; smaller for small models, so they spread too); chunks are packed into a
// fixed number of virtual shards, and virtual shards are assigned to PS processes, both greedily by
// bytes (largest first onto the lightest), so any PS count balances well and
// a lost PS later moves whole virtual shards only. The map carries an epoch
// that every data message repeats; a PS refuses other epochs.
// With `replicas` 2 every virtual shard also has a backup on another PS
// (balanced by bytes held), on another host than its owner whenever a
// usable PS on another host exists (ps_hosts: a host is a failure domain,
// so losing a whole host loses no shard); AfterLoss() promotes a lost PS's backups and
// finds new backups among the usable PS, WithPs() gives shards without a
// backup one on a PS that (re)joined.
// Chunks of one tensor are consecutive and in tensor order.
// Thread safety: an immutable value once built.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "schema/een.capnp.h"

namespace een {

// How the PS treat a tensor (schema's TensorKind, same values).
enum class TensorKind : uint8_t {
  kParameter = 0,        // gradients in, the optimizer applied
  kBufferBroadcast = 1,  // values in every step; the lowest live rank's are kept
  kBufferAverage = 2,    // values in every step; their mean is kept
  kFrozen = 3,           // rank 0's initial values, never pushed again
};
inline bool IsBuffer(TensorKind k) {
  return k == TensorKind::kBufferBroadcast || k == TensorKind::kBufferAverage;
}
// Pushed and pulled every step (parameters and buffers; not frozen ones).
inline bool IsTrained(TensorKind k) { return k != TensorKind::kFrozen; }
const char* TensorKindName(TensorKind k);

struct TensorInfo {
  std::string name;
  uint64_t numel = 0;
  TensorKind kind = TensorKind::kParameter;
  std::vector<int64_t> shape;  // for messages only; may be empty
};
// The model a worker of the een torch.distributed backend registers
// (een/process_group.h): one frozen placeholder element of this name.
inline constexpr const char* kProcessGroupModelName = "een.process_group";
// Whether `model` is that placeholder: the job serves collectives only.
inline bool IsProcessGroupModel(const std::vector<TensorInfo>& model) {
  return model.size() == 1 && model[0].name == kProcessGroupModelName;
}

// Reads and checks one TensorSpec (a kind the schema does not define is an error).
Result<TensorInfo> TensorFromWire(wire::TensorSpec::Reader reader);
void TensorToWire(const TensorInfo& tensor, wire::TensorSpec::Builder builder);
Result<std::vector<TensorInfo>> TensorsFromWire(capnp::List<wire::TensorSpec>::Reader list);
void TensorsToWire(const std::vector<TensorInfo>& tensors,
                   capnp::List<wire::TensorSpec>::Builder list);

// A PS's same-host route (shared memory): for processes on `host` only.
struct LocalRoute {
  std::string host;
  std::string address;  // empty: none
  bool operator==(const LocalRoute&) const = default;
};

struct Chunk {
  uint32_t tensor = 0;
  uint64_t offset = 0;  // first element within the tensor
  uint32_t numel = 0;
  uint32_t shard = 0;  // virtual shard
};

struct ShardingOptions {
  uint32_t max_chunk_numel = 1u << 18;  // 1 MiB of fp32
  uint32_t shards_per_ps = 16;          // virtual shards = num_ps * shards_per_ps
  uint32_t replicas = 1;                // 2: every shard has a backup on another PS
};

class ShardMap {
 public:
  static constexpr uint32_t kNoPs = UINT32_MAX;

  ShardMap() = default;

  // `ps_hosts`: each PS's host ("" or missing: unknown), for placement.
  static Result<ShardMap> Build(std::vector<TensorInfo> tensors, uint32_t num_ps,
                                const ShardingOptions& options,
                                std::vector<std::string> ps_addresses, uint64_t epoch = 1,
                                std::vector<std::string> ps_hosts = {});

  // Validates every index and size while reading.
  static Result<ShardMap> FromWire(wire::ShardMap::Reader reader);
  void ToWire(wire::ShardMap::Builder builder) const;

  uint64_t epoch() const { return epoch_; }
  // Where each PS runs, for placing backups only (maps derived from this
  // one keep it). Not on the wire: the coordinator alone places shards, and
  // sets it again after a restart or when a PS joins on some host.
  void SetPsHosts(std::vector<std::string> hosts) { ps_hosts_ = std::move(hosts); }
  // Both PS known to run on one host.
  bool SameHost(uint32_t a, uint32_t b) const {
    return a < ps_hosts_.size() && b < ps_hosts_.size() && !ps_hosts_[a].empty() &&
           ps_hosts_[a] == ps_hosts_[b];
  }
  // How processes on a PS's own host reach it without leaving the host
  // (on the wire; one per PS, or none at all). Derived maps keep them (a PS
  // added has none); the coordinator sets them again when a PS changes.
  void SetLocalRoutes(std::vector<LocalRoute> routes) { local_routes_ = std::move(routes); }
  const std::vector<LocalRoute>& local_routes() const { return local_routes_; }
  // Where a process on `host` connects to PS `ps`: its same-host route when
  // it has one on that host, else its data address (per pair, no flag).
  const std::string& AddressFor(uint32_t ps, const std::string& host) const;
  uint32_t num_ps() const { return static_cast<uint32_t>(ps_addresses_.size()); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  const std::vector<std::string>& ps_addresses() const { return ps_addresses_; }
  uint32_t OwnerOfChunk(uint32_t chunk) const { return shard_owner_[chunks_[chunk].shard]; }
  TensorKind KindOfChunk(uint32_t chunk) const { return tensors_[chunks_[chunk].tensor].kind; }
  // kNoPs when the chunk has no backup.
  uint32_t BackupOfChunk(uint32_t chunk) const {
    return shard_backup_.empty() ? kNoPs : shard_backup_[chunks_[chunk].shard];
  }
  bool replicated() const { return !shard_backup_.empty(); }
  // The map epoch since which `shard`'s backup has been on its PS: the
  // backup is built once that PS holds every chunk of this epoch or a later
  // one. Kept through the maps derived from this one; a map read from the
  // wire knows no history (its own epoch for every shard).
  uint64_t BackupSince(uint32_t shard) const {
    return shard < backup_since_.size() ? backup_since_[shard] : epoch_;
  }
  uint32_t num_shards() const { return static_cast<uint32_t>(shard_owner_.size()); }
  uint32_t OwnerOfShard(uint32_t shard) const { return shard_owner_[shard]; }
  uint32_t BackupOfShard(uint32_t shard) const {
    return shard_backup_.empty() ? kNoPs : shard_backup_[shard];
  }
  // A copy with PS `lost` gone: its shards go to their backups, and shards
  // left without a backup get one on a usable PS (usable[ps]), if any.
  // Fails when a shard of `lost` has no backup to promote.
  Result<ShardMap> AfterLoss(uint32_t lost, const std::vector<bool>& usable, uint64_t epoch) const;
  // A copy where PS `ps` is (again) at `address` and usable: every shard
  // without a backup gets one, the least loaded usable PS first.
  ShardMap WithPs(uint32_t ps, const std::string& address, const std::vector<bool>& usable,
                  uint64_t epoch) const;
  // Moving shards while training goes on, in two map epochs: Staged()
  // makes each moved shard's new owner its backup (it receives an image
  // and is kept in step), then Moved() hands it ownership; the old owner
  // stays as backup with replicas 2 unless it is leaving (then the shard
  // gets a backup on a usable PS). `moves`: virtual shard -> new owner.
  using Moves = std::map<uint32_t, uint32_t>;
  ShardMap WithNewPs(const std::string& address, uint64_t epoch) const;
  // Shards to move onto PS `to` (largest first, each only from an owner it
  // leaves at least as heavy as `to`) until `to` holds
  // about its share of the bytes.
  Moves MovesOnto(uint32_t to, const std::vector<bool>& usable) const;
  // Every shard PS `from` owns, each to the usable PS that owns least.
  Moves MovesOff(uint32_t from, const std::vector<bool>& usable) const;
  ShardMap Staged(const Moves& moves, uint64_t epoch) const;
  ShardMap Moved(const Moves& moves, int replicas, int leaving, const std::vector<bool>& usable,
                 uint64_t epoch) const;
  uint64_t ShardBytes(uint32_t shard) const;
  std::vector<uint64_t> BytesPerShard() const;  // fp32 bytes of each virtual shard
  // A copy with these PS addresses (replacement processes) and epoch.
  Result<ShardMap> WithAddresses(std::vector<std::string> addresses, uint64_t epoch) const;
  // Chunks this PS owns or backs up.
  std::vector<uint32_t> ChunksHeldBy(uint32_t ps) const;
  // Chunk ids of `tensor`: [first, first + count).
  uint32_t FirstChunkOf(uint32_t tensor) const { return first_chunk_[tensor]; }
  uint32_t ChunkCountOf(uint32_t tensor) const {
    return first_chunk_[tensor + 1] - first_chunk_[tensor];
  }
  std::vector<uint32_t> ChunksOwnedBy(uint32_t ps) const;
  std::vector<uint64_t> BytesPerPs(size_t bytes_per_element = 4) const;
  uint64_t TotalNumel() const;

 private:
  void IndexChunks();
  // This map derived from `before`: each shard whose backup changed has it
  // since this map's epoch, the others since when `before` had it.
  void NoteBackupChanges(const ShardMap& before);
  // Gives every shard without a (usable, distinct) backup one: heaviest
  // shard first onto the usable PS that holds the fewest bytes, on another
  // host than the owner if any usable PS is (a backup on the owner's host
  // counts as missing then).
  void AssignMissingBackups(const std::vector<bool>& usable);

  uint64_t epoch_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<Chunk> chunks_;
  std::vector<uint32_t> shard_owner_;
  std::vector<uint32_t> shard_backup_;  // empty without replication
  std::vector<std::string> ps_addresses_;
  std::vector<uint32_t> first_chunk_;     // per tensor, plus one past the end
  std::vector<std::string> ps_hosts_;     // placement only; not on the wire
  std::vector<LocalRoute> local_routes_;  // empty, or one per PS
  std::vector<uint64_t> backup_since_;    // per shard (see BackupSince); not on the wire
};

}  // namespace een
