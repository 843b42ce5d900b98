#include "launcher/state_store.h"

#include <rocksdb/db.h>

namespace een {

namespace {
constexpr const char* kKey = "coordinator/state";
}

Result<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  // A few KB of state: no 70 MB preallocated log in the run folder.
  options.write_buffer_size = 1 << 20;
  options.allow_fallocate = false;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok())
    return Unavailable("cannot open the coordinator state " + path + ": " + s.ToString());
  return std::unique_ptr<StateStore>(new StateStore(path, db));
}

StateStore::~StateStore() { delete db_; }

Status StateStore::Put(const std::string& bytes) {
  rocksdb::WriteOptions options;
  options.sync = true;
  rocksdb::Status s = db_->Put(options, kKey, bytes);
  if (!s.ok()) return Unavailable("saving the coordinator state to " + path_ + ": " + s.ToString());
  return Status::Ok();
}

Result<std::optional<std::string>> StateStore::Get() const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kKey, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return DataLoss("reading the coordinator state from " + path_ + ": " + s.ToString());
  return std::optional<std::string>(std::move(value));
}

}  // namespace een
