// SnapshotStore: one PS's snapshots, in a RocksDB of its own.
//
// A snapshot is every chunk this PS holds at one step: values, optimizer
// state and version, written in one atomic WriteBatch together with a
// manifest that lists each chunk's size and CRC-32 (and under ssp/async
// each worker's steps applied to it). A snapshot counts only
// if its manifest is there and every chunk matches it: a torn or corrupted
// one is reported, never used. The newest `keep` snapshots are kept.
// A write that fails (disk full) loses nothing older: the store reopens
// before the next one; a store with no room to open for writing opens for
// reading, and writes try again later.
// Thread safety: every method may be called from any thread (one lock: the
// PS may read for a rollback while its snapshot writer writes).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class DB;
class Status;
}  // namespace rocksdb

namespace een {

struct ChunkImage {
  uint32_t chunk = 0;
  uint64_t version = 0;
  std::vector<float> data;  // values, then each optimizer state slot
  // ssp/async: per worker, its steps applied (in the manifest of a snapshot).
  std::vector<uint64_t> worker_steps;
};

class SnapshotStore {
 public:
  static Result<std::unique_ptr<SnapshotStore>> Open(const std::string& path, int keep = 3);
  // For reading only, beside the PS that may have it open for writing
  // (RocksDB's read-only mode takes no lock); NotFound when `path` holds no
  // store.
  static Result<std::unique_ptr<SnapshotStore>> OpenForReading(const std::string& path);
  ~SnapshotStore();

  const std::string& path() const { return path_; }
  Status Write(uint64_t step, const std::vector<ChunkImage>& chunks);
  // Steps with a snapshot (a manifest), newest first, unverified (past a
  // damaged table file: any step a table file holds).
  std::vector<uint64_t> Steps() const;
  // Steps with a whole, verified snapshot, newest first. Each snapshot
  // that exists but fails verification, and a store that cannot be read
  // through, adds a line to `problems`.
  std::vector<uint64_t> IntactSteps(std::vector<std::string>* problems) const;
  Result<std::vector<ChunkImage>> Read(uint64_t step) const;

 private:
  SnapshotStore(std::string path, int keep) : path_(std::move(path)), keep_(keep) {}
  // Closes and opens the database for writing (db_ null when that fails;
  // the error says why).
  Status Reopen() const;
  // (`problem`, when given: why the listing stopped short, else "".)
  std::vector<uint64_t> ManifestStepsLocked(std::string* problem = nullptr) const;
  // For a listing cut short by a damaged table file: adds the steps at the
  // ends of each table file's key range (RocksDB's metadata, no data block
  // read; a snapshot is one file when written) whose manifest was not
  // deleted, newest first. A damaged file then hides no step from the
  // report (a step of another file may still be unreadable: RocksDB looks
  // a key up in each of up to 3 level-0 files, the damaged one too).
  void AddTableFileStepsLocked(std::vector<uint64_t>* steps) const;
  // "Corruption: ... (the store's files are damaged: ...)" for a failed read.
  std::string ReadError(const rocksdb::Status& s) const;
  // Unavailable ("WHAT in PATH failed: disk full ...") when the disk lacks
  // room for a snapshot of `bytes` (0: for opening the store).
  Status CheckRoom(const std::string& what, uint64_t bytes) const;
  Result<std::vector<ChunkImage>> ReadLocked(uint64_t step) const;

  const std::string path_;
  const int keep_;
  mutable std::mutex mu_;
  // The open database; reopened under mu_ from reads too, hence mutable.
  mutable rocksdb::DB* db_ = nullptr;  // owned
  mutable bool read_only_ = false;
  bool needs_reopen_ = false;  // the last write failed
};

}  // namespace een
