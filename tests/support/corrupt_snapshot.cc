// corrupt_snapshot DB: flips one byte of one chunk of the newest snapshot in
// a PS's snapshot store, as a failing disk would. Prints the step it hit.
#include <rocksdb/db.h>

#include <cstdio>
#include <memory>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: corrupt_snapshot DB_PATH\n");
    return 2;
  }
  rocksdb::DB* db = nullptr;
  if (!rocksdb::DB::Open(rocksdb::Options(), argv[1], &db).ok()) return 1;
  std::string newest_chunk;
  {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToLast(); it->Valid(); it->Prev()) {
      const std::string key = it->key().ToString();
      if (key.find("/chunk/") != std::string::npos) {
        newest_chunk = key;
        break;
      }
    }
  }
  std::string value;
  if (newest_chunk.empty() || !db->Get(rocksdb::ReadOptions(), newest_chunk, &value).ok()) return 1;
  value[value.size() / 2] ^= 0x5a;
  if (!db->Put(rocksdb::WriteOptions(), newest_chunk, value).ok()) return 1;
  std::printf("corrupted %s\n", newest_chunk.c_str());
  delete db;
  return 0;
}
