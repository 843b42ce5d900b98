// StateStore: the coordinator's own durable state, one value in a RocksDB,
// written synchronously, so a restarted coordinator loses nothing it said.
// Thread safety: one thread at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace rocksdb {
class DB;
}

namespace een {

class StateStore {
 public:
  static Result<std::unique_ptr<StateStore>> Open(const std::string& path);
  ~StateStore();
  Status Put(const std::string& bytes);
  // nullopt when nothing was ever written.
  Result<std::optional<std::string>> Get() const;

 private:
  StateStore(std::string path, rocksdb::DB* db) : path_(std::move(path)), db_(db) {}
  std::string path_;
  rocksdb::DB* db_;
};

}  // namespace een
