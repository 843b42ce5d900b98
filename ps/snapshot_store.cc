#include "ps/snapshot_store.h"

#include <filesystem>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <zlib.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace een::ps {
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

uint32_t Crc(const void* data, size_t n) {
  return static_cast<uint32_t>(crc32(0L, static_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

// A chunk record: version (8 bytes) then the floats.
std::string EncodeChunk(const ChunkImage& c) {
  std::string out(sizeof c.version + c.data.size() * sizeof(float), '\0');
  std::memcpy(out.data(), &c.version, sizeof c.version);
  std::memcpy(out.data() + sizeof c.version, c.data.data(), c.data.size() * sizeof(float));
  return out;
}

struct ManifestEntry {
  uint32_t chunk;
  uint64_t bytes;
  uint32_t crc;
};

// Text: one "chunk bytes crc" line per chunk.
std::string EncodeManifest(const std::vector<ManifestEntry>& entries) {
  std::ostringstream out;
  for (const auto& e : entries) out << e.chunk << ' ' << e.bytes << ' ' << e.crc << '\n';
  return out.str();
}

std::vector<ManifestEntry> DecodeManifest(const std::string& text) {
  std::vector<ManifestEntry> entries;
  std::istringstream in(text);
  ManifestEntry e;
  while (in >> e.chunk >> e.bytes >> e.crc) entries.push_back(e);
  return entries;
}

}  // namespace

Result<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(const std::string& path, int keep) {
  // The folder is the user's only (0700): snapshots hold the model.
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) {
    return Unavailable("cannot open the snapshot store " + path + ": " + s.ToString() +
                       " (is the folder writable, and not in use by another PS?)");
  }
  return std::unique_ptr<SnapshotStore>(new SnapshotStore(path, db, keep));
}

SnapshotStore::~SnapshotStore() { delete db_; }

Status SnapshotStore::Write(uint64_t step, const std::vector<ChunkImage>& chunks) {
  rocksdb::WriteBatch batch;
  std::vector<ManifestEntry> manifest;
  for (const ChunkImage& c : chunks) {
    std::string record = EncodeChunk(c);
    manifest.push_back({c.chunk, record.size(), Crc(record.data(), record.size())});
    batch.Put(ChunkKey(step, c.chunk), record);
  }
  batch.Put(ManifestKey(step), EncodeManifest(manifest));
  // Older snapshots beyond `keep_` go in the same batch.
  std::vector<uint64_t> steps = ManifestSteps();
  int kept = 1;
  for (uint64_t old : steps) {  // newest first
    if (old == step) continue;
    if (++kept > keep_) batch.DeleteRange(StepPrefix(old), StepPrefix(old + 1));
  }
  rocksdb::WriteOptions options;
  options.sync = true;  // a snapshot is durable once we say it is
  rocksdb::Status s = db_->Write(options, &batch);
  if (!s.ok()) {
    return Unavailable("writing the snapshot of step " + std::to_string(step) + " to " + path_ +
                       " failed: " + s.ToString() + (s.IsNoSpace() ? " (disk full)" : ""));
  }
  return Status::Ok();
}

std::vector<uint64_t> SnapshotStore::ManifestSteps() const {
  std::vector<uint64_t> steps;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("snap/"); it->Valid() && it->key().starts_with("snap/"); it->Next()) {
    const std::string key = it->key().ToString();
    if (key.size() > 6 && key.compare(key.size() - 9, 9, "/manifest") == 0) {
      steps.push_back(std::stoull(key.substr(5, 20)));
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::vector<uint64_t> SnapshotStore::IntactSteps(std::vector<std::string>* problems) const {
  std::vector<uint64_t> intact;
  for (uint64_t step : ManifestSteps()) {
    auto chunks = Read(step);
    if (chunks.ok()) {
      intact.push_back(step);
    } else if (problems) {
      problems->push_back(chunks.status().message());
    }
  }
  return intact;
}

Result<std::vector<ChunkImage>> SnapshotStore::Read(uint64_t step) const {
  const std::string where = "snapshot of step " + std::to_string(step) + " in " + path_;
  std::string manifest_text;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ManifestKey(step), &manifest_text);
  if (!s.ok()) return DataLoss(where + " has no manifest: " + s.ToString());
  std::vector<ChunkImage> chunks;
  for (const ManifestEntry& e : DecodeManifest(manifest_text)) {
    std::string record;
    s = db_->Get(rocksdb::ReadOptions(), ChunkKey(step, e.chunk), &record);
    if (!s.ok()) return DataLoss(where + ": chunk " + std::to_string(e.chunk) + " is missing");
    if (record.size() != e.bytes || Crc(record.data(), record.size()) != e.crc ||
        record.size() < sizeof(uint64_t) || (record.size() - sizeof(uint64_t)) % sizeof(float)) {
      return DataLoss(where + ": chunk " + std::to_string(e.chunk) +
                      " does not match its checksum (corrupted on disk)");
    }
    ChunkImage c;
    c.chunk = e.chunk;
    std::memcpy(&c.version, record.data(), sizeof c.version);
    c.data.resize((record.size() - sizeof c.version) / sizeof(float));
    std::memcpy(c.data.data(), record.data() + sizeof c.version, c.data.size() * sizeof(float));
    chunks.push_back(std::move(c));
  }
  return chunks;
}

}  // namespace een::ps
