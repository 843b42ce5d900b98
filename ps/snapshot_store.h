// SnapshotStore: one PS's snapshots, in a RocksDB of its own.
//
// A snapshot is every chunk this PS holds at one step: values, optimizer
// state and version, written in one atomic WriteBatch together with a
// manifest that lists each chunk's size and CRC-32. A snapshot counts only
// if its manifest is there and every chunk matches it: a torn or corrupted
// one is reported, never used. The newest `keep` snapshots are kept.
// Thread safety: one thread at a time (the PS's snapshot writer, or the PS
// itself before it serves).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class DB;
}

namespace een::ps {

struct ChunkImage {
  uint32_t chunk = 0;
  uint64_t version = 0;
  std::vector<float> data;  // values, then each optimizer state slot
};

class SnapshotStore {
 public:
  static Result<std::unique_ptr<SnapshotStore>> Open(const std::string& path, int keep = 3);
  ~SnapshotStore();

  const std::string& path() const { return path_; }
  Status Write(uint64_t step, const std::vector<ChunkImage>& chunks);
  // Steps with a whole, verified snapshot, newest first. Each snapshot
  // that exists but fails verification adds a line to `problems`.
  std::vector<uint64_t> IntactSteps(std::vector<std::string>* problems) const;
  Result<std::vector<ChunkImage>> Read(uint64_t step) const;

 private:
  SnapshotStore(std::string path, rocksdb::DB* db, int keep)
      : path_(std::move(path)), db_(db), keep_(keep) {}
  std::vector<uint64_t> ManifestSteps() const;

  std::string path_;
  rocksdb::DB* db_;
  int keep_;
};

}  // namespace een::ps
