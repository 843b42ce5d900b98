#include "common/snapshot_store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

namespace een {
namespace {

// Keys sort by step: "snap/<20-digit step>/manifest" and ".../chunk/<10-digit id>".
std::string StepPrefix(uint64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "snap/%020" PRIu64 "/", step);
  return buf;
}
std::string ChunkKey(uint64_t step, uint32_t chunk) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "chunk/%010u", chunk);
  return StepPrefix(step) + buf;
}
std::string ManifestKey(uint64_t step) { return StepPrefix(step) + "manifest"; }

// The step of a key under "snap/<20-digit step>/"; nothing for any other
// key (one this store never writes: a damaged or edited database is read,
// not trusted).
std::optional<uint64_t> KeyStep(const std::string& key) {
  const std::string prefix = "snap/";
  constexpr size_t kDigits = 20;
  if (key.size() < prefix.size() + kDigits + 1 || key.rfind(prefix, 0) != 0 ||
      key[prefix.size() + kDigits] != '/') {
    return std::nullopt;
  }
  uint64_t step = 0;
  const char* digits = key.data() + prefix.size();
  const auto [end, error] = std::from_chars(digits, digits + kDigits, step);
  if (error != std::errc() || end != digits + kDigits)
    return std::nullopt;  // not all digits, or > 2^64
  return step;
}

// The step of a manifest key; nothing for any other key.
std::optional<uint64_t> ManifestStep(const std::string& key) {
  const std::optional<uint64_t> step = KeyStep(key);
  if (!step || key != ManifestKey(*step)) return std::nullopt;
  return step;
}

uint32_t Crc(const void* data, size_t n) {
  return static_cast<uint32_t>(crc32(0L, static_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

// A chunk record: version (8 bytes) then the floats.
std::string EncodeChunk(const ChunkImage& c) {
  std::string out(sizeof c.version + c.data.size() * sizeof(float), '\0');
  std::memcpy(out.data(), &c.version, sizeof c.version);
  if (!c.data.empty()) {  // an empty chunk's data() may be null
    std::memcpy(out.data() + sizeof c.version, c.data.data(), c.data.size() * sizeof(float));
  }
  return out;
}

struct ManifestEntry {
  uint32_t chunk;
  uint64_t bytes;
  uint32_t crc;
  std::vector<uint64_t> worker_steps;  // ssp/async only
};

// Text: one "chunk bytes crc" line per chunk; under ssp/async each line
// goes on with every worker's steps applied to the chunk.
std::string EncodeManifest(const std::vector<ManifestEntry>& entries) {
  std::ostringstream out;
  for (const auto& e : entries) {
    out << e.chunk << ' ' << e.bytes << ' ' << e.crc;
    for (uint64_t n : e.worker_steps) out << ' ' << n;
    out << '\n';
  }
  return out.str();
}

std::vector<ManifestEntry> DecodeManifest(const std::string& text) {
  std::vector<ManifestEntry> entries;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    ManifestEntry e;
    if (!(in >> e.chunk >> e.bytes >> e.crc)) break;
    for (uint64_t n; in >> n;) e.worker_steps.push_back(n);
    entries.push_back(std::move(e));
  }
  return entries;
}

rocksdb::Options StoreOptions() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  // No preallocated files: on a nearly full disk the preallocation fails
  // first. A write that does not fit fails as that write.
  options.allow_fallocate = false;
  return options;
}

}  // namespace

Result<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(const std::string& path, int keep) {
  // The folder is the user's only (0700): snapshots hold the model.
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  std::unique_ptr<SnapshotStore> store(new SnapshotStore(path, keep));
  const bool exists = std::filesystem::exists(path + "/CURRENT", ec);
  // Opening for writing writes RocksDB's own files: never on a full disk.
  Status s = store->CheckRoom("opening the snapshot store", 0);
  if (s.ok()) s = store->Reopen();
  if (s.ok()) return store;
  // No room (or no right) to write: the snapshots there can still be read,
  // which is all a resuming PS needs at first; writes try again later.
  rocksdb::DB* db = nullptr;
  if (exists && rocksdb::DB::OpenForReadOnly(StoreOptions(), path, &db).ok()) {
    store->db_ = db;
    store->read_only_ = true;
    spdlog::warn(
        "the snapshot store {} is open for reading only ({}): its snapshots can be "
        "read; new ones are written once there is room to open it for writing",
        path, s.message());
    return store;
  }
  return Unavailable("cannot open the snapshot store " + path + ": " + s.message() +
                     " (is the folder writable, with room, and not in use by another PS?)");
}

Result<std::unique_ptr<SnapshotStore>> SnapshotStore::OpenForReading(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path + "/CURRENT", ec)) {
    return NotFound(path + " holds no snapshot store");
  }
  std::unique_ptr<SnapshotStore> store(new SnapshotStore(path, /*keep=*/0));
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::OpenForReadOnly(StoreOptions(), path, &db);
  if (!s.ok()) return Unavailable("cannot read the snapshot store " + path + ": " + s.ToString());
  store->db_ = db;
  store->read_only_ = true;
  return store;
}

SnapshotStore::~SnapshotStore() { delete db_; }

Status SnapshotStore::Reopen() const {
  delete db_;  // closing first: RocksDB allows one opener
  db_ = nullptr;
  read_only_ = false;
  const rocksdb::Status s = rocksdb::DB::Open(StoreOptions(), path_, &db_);
  if (s.ok()) return Status::Ok();
  db_ = nullptr;
  return Unavailable(s.ToString() + (s.IsNoSpace() ? " (disk full)" : ""));
}

Status SnapshotStore::Write(uint64_t step, const std::vector<ChunkImage>& chunks) {
  std::lock_guard<std::mutex> lock(mu_);
  // Room first: RocksDB is never handed a full disk (Debian's build aborts
  // on an assertion when a write, flush, compaction or open meets one).
  uint64_t bytes = 0;
  for (const ChunkImage& c : chunks) bytes += sizeof c.version + c.data.size() * sizeof(float);
  const std::string what = "writing the snapshot of step " + std::to_string(step);
  if (Status room = CheckRoom(what, bytes); !room.ok()) return room;
  // After a failed write, RocksDB keeps refusing writes; a reopened store
  // forgets what was not durable and takes writes again.
  if (needs_reopen_ || read_only_ || !db_) {
    if (Status s = Reopen(); !s.ok()) {
      return Unavailable(what + " to " + path_ +
                         " failed: cannot reopen the store: " + s.message());
    }
    needs_reopen_ = false;
  }
  rocksdb::WriteBatch batch;
  std::vector<ManifestEntry> manifest;
  for (const ChunkImage& c : chunks) {
    std::string record = EncodeChunk(c);
    manifest.push_back({c.chunk, record.size(), Crc(record.data(), record.size()), c.worker_steps});
    batch.Put(ChunkKey(step, c.chunk), record);
  }
  batch.Put(ManifestKey(step), EncodeManifest(manifest));
  // Older snapshots beyond `keep_` go in the same batch.
  std::vector<uint64_t> steps = ManifestStepsLocked();
  int kept = 1;
  for (uint64_t old : steps) {  // newest first
    if (old == step) continue;
    if (++kept > keep_) batch.DeleteRange(StepPrefix(old), StepPrefix(old + 1));
  }
  // No write-ahead log: the batch goes into the memtable and is flushed at
  // once into a table file, synced; a snapshot is durable once we say so.
  // (Debian's RocksDB aborts on an assertion when a log write hits a full
  // disk; a failed flush returns its error.) One flush holds the whole
  // batch, so a snapshot is on disk whole or not at all.
  rocksdb::WriteOptions options;
  options.disableWAL = true;
  rocksdb::Status s = db_->Write(options, &batch);
  if (s.ok()) {
    rocksdb::FlushOptions flush;
    flush.wait = true;
    s = db_->Flush(flush);
  }
  if (!s.ok()) {
    needs_reopen_ = true;
    return Unavailable(what + " to " + path_ + " failed: " + s.ToString() +
                       (s.IsNoSpace() ? " (disk full)" : ""));
  }
  return Status::Ok();
}

std::vector<uint64_t> SnapshotStore::ManifestStepsLocked(std::string* problem) const {
  std::vector<uint64_t> steps;
  if (!db_) return steps;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("snap/"); it->Valid() && it->key().starts_with("snap/"); it->Next()) {
    if (auto step = ManifestStep(it->key().ToString())) steps.push_back(*step);
  }
  if (problem) {
    *problem = it->status().ok() ? ""
                                 : "the snapshots in " + path_ +
                                       " cannot all be listed: " + ReadError(it->status());
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

void SnapshotStore::AddTableFileStepsLocked(std::vector<uint64_t>* steps) const {
  if (!db_) return;
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  for (const rocksdb::LiveFileMetaData& f : files) {
    for (const std::string& key : {f.smallestkey, f.largestkey}) {
      const std::optional<uint64_t> step = KeyStep(key);
      if (!step || std::find(steps->begin(), steps->end(), *step) != steps->end()) continue;
      std::string manifest;
      if (db_->Get(rocksdb::ReadOptions(), ManifestKey(*step), &manifest).IsNotFound()) continue;
      steps->push_back(*step);
    }
  }
  std::sort(steps->rbegin(), steps->rend());
}

std::string SnapshotStore::ReadError(const rocksdb::Status& s) const {
  if (!s.IsCorruption()) return s.ToString();
  return s.ToString() + " (the store's files are damaged: restore " + path_ +
         " from a copy if you keep one; without it these snapshots cannot be resumed)";
}

std::vector<uint64_t> SnapshotStore::Steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string problem;
  std::vector<uint64_t> steps = ManifestStepsLocked(&problem);
  if (!problem.empty()) AddTableFileStepsLocked(&steps);
  return steps;
}

Status SnapshotStore::CheckRoom(const std::string& what, uint64_t bytes) const {
  struct statvfs fs {};
  if (statvfs(path_.c_str(), &fs) != 0) return Status::Ok();  // unknown: let the write say
  const unsigned __int128 free = static_cast<unsigned __int128>(fs.f_bavail) * fs.f_frsize;
  // The new snapshot, room to compact the `keep_` older ones it replaces,
  // and 1 MiB for RocksDB's own files.
  const unsigned __int128 need = static_cast<unsigned __int128>(bytes) * (keep_ + 1) + (1u << 20);
  if (free >= need) return Status::Ok();
  return Unavailable(what + " in " + path_ + " failed: disk full (" +
                     std::to_string(static_cast<uint64_t>(free)) + " bytes free; " +
                     (bytes ? "a snapshot of " + std::to_string(bytes) + " bytes needs " +
                                  std::to_string(static_cast<uint64_t>(need)) +
                                  ": itself, and room to compact the ones it replaces)"
                            : "the store needs 1 MiB for its own files)"));
}

std::vector<uint64_t> SnapshotStore::IntactSteps(std::vector<std::string>* problems) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> intact;
  std::string listing;
  std::vector<uint64_t> steps = ManifestStepsLocked(&listing);
  if (!listing.empty()) {
    if (problems) problems->push_back(listing);
    AddTableFileStepsLocked(&steps);
  }
  for (uint64_t step : steps) {
    auto chunks = ReadLocked(step);
    if (chunks.ok()) {
      intact.push_back(step);
    } else if (problems) {
      problems->push_back(chunks.status().message());
    }
  }
  return intact;
}

Result<std::vector<ChunkImage>> SnapshotStore::Read(uint64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ReadLocked(step);
}

Result<std::vector<ChunkImage>> SnapshotStore::ReadLocked(uint64_t step) const {
  const std::string where = "snapshot of step " + std::to_string(step) + " in " + path_;
  if (!db_) {
    if (Status s = Reopen(); !s.ok()) {
      return Unavailable(where +
                         " cannot be read: reopening the store after a failed write "
                         "failed: " +
                         s.message());
    }
  }
  std::string manifest_text;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ManifestKey(step), &manifest_text);
  if (s.IsNotFound()) return DataLoss(where + " has no manifest");
  if (!s.ok()) return DataLoss(where + " cannot be read: " + ReadError(s));
  std::vector<ChunkImage> chunks;
  for (const ManifestEntry& e : DecodeManifest(manifest_text)) {
    std::string record;
    s = db_->Get(rocksdb::ReadOptions(), ChunkKey(step, e.chunk), &record);
    if (s.IsNotFound())
      return DataLoss(where + ": chunk " + std::to_string(e.chunk) + " is missing");
    if (!s.ok()) {
      return DataLoss(where + ": chunk " + std::to_string(e.chunk) +
                      " cannot be read: " + ReadError(s));
    }
    if (record.size() != e.bytes || Crc(record.data(), record.size()) != e.crc ||
        record.size() < sizeof(uint64_t) || (record.size() - sizeof(uint64_t)) % sizeof(float)) {
      return DataLoss(where + ": chunk " + std::to_string(e.chunk) +
                      " does not match its checksum (corrupted on disk)");
    }
    ChunkImage c;
    c.chunk = e.chunk;
    c.worker_steps = e.worker_steps;
    std::memcpy(&c.version, record.data(), sizeof c.version);
    c.data.resize((record.size() - sizeof c.version) / sizeof(float));
    if (!c.data.empty()) {  // an empty chunk's data() may be null
      std::memcpy(c.data.data(), record.data() + sizeof c.version, c.data.size() * sizeof(float));
    }
    chunks.push_back(std::move(c));
  }
  return chunks;
}

}  // namespace een
