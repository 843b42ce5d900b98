// Fuzz target: a PS's snapshot store as it may be found on disk after a
// crash, a bad disk or a stranger's edit: any keys and values in its
// RocksDB. The input is a list of records (below) written into a fresh
// database; then the store is opened as a PS opens it, every snapshot
// listed, verified and read, and one more snapshot written (which also
// trims the old ones). Any answer is fine but a crash.
// Record: a kind byte, then
//   0 manifest: step (1 byte), value
//   1 chunk: step (1 byte), chunk (2 bytes), value
//   2 any key: length (1 byte), key bytes, value
//   3 a well-formed chunk: step (1 byte), chunk (2 bytes), version (1 byte),
//     count (1 byte) floats; its line is added to that step's manifest, so
//     the fuzzer reaches the paths behind the checksums
// where value = length (2 bytes) then bytes.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/snapshot_store.h"
#include "fuzz/scratch_path.h"

using namespace een;

namespace {

struct Input {
  const uint8_t* p;
  const uint8_t* end;
  bool Take(void* out, size_t n) {
    if (size_t(end - p) < n) return false;
    std::memcpy(out, p, n);
    p += n;
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    n = std::min(n, size_t(end - p));
    out->assign(reinterpret_cast<const char*>(p), n);
    p += n;
    return true;
  }
  bool Value(std::string* out) {
    uint16_t n = 0;
    return Take(&n, 2) && Bytes(n, out);
  }
};

std::string StepPrefix(unsigned step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "snap/%020u/", step);
  return buf;
}
std::string ChunkKey(unsigned step, unsigned chunk) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "chunk/%010u", chunk);
  return StepPrefix(step) + buf;
}

std::string Folder() {
  static const fuzz::ScratchPath folder("snapshots");
  return folder.string();
}

// A fresh database holding exactly the input's records.
bool WriteRecords(const uint8_t* data, size_t size) {
  std::filesystem::remove_all(Folder());
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  if (!rocksdb::DB::Open(options, Folder(), &db).ok()) return false;
  rocksdb::WriteBatch batch;
  std::map<unsigned, std::string> manifests;  // well-formed chunks' lines, by step
  Input in{data, data + size};
  uint8_t kind = 0;
  while (in.Take(&kind, 1)) {
    uint8_t step = 0, len = 0, version = 0, count = 0;
    uint16_t chunk = 0;
    std::string key, value;
    switch (kind % 4) {
      case 0:
        if (!in.Take(&step, 1) || !in.Value(&value)) break;
        batch.Put(StepPrefix(step) + "manifest", value);
        break;
      case 1:
        if (!in.Take(&step, 1) || !in.Take(&chunk, 2) || !in.Value(&value)) break;
        batch.Put(ChunkKey(step, chunk), value);
        break;
      case 2:
        if (!in.Take(&len, 1) || !in.Bytes(len, &key) || !in.Value(&value)) break;
        batch.Put(key, value);
        break;
      case 3: {
        if (!in.Take(&step, 1) || !in.Take(&chunk, 2) || !in.Take(&version, 1) ||
            !in.Take(&count, 1)) {
          break;
        }
        std::string record(8 + 4 * size_t{count}, '\0');
        const uint64_t v = version;
        std::memcpy(record.data(), &v, 8);
        std::string floats;
        in.Bytes(4 * size_t{count}, &floats);
        std::memcpy(record.data() + 8, floats.data(), floats.size());
        batch.Put(ChunkKey(step, chunk), record);
        const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(record.data()),
                                static_cast<uInt>(record.size()));
        manifests[step] += std::to_string(chunk) + " " + std::to_string(record.size()) + " " +
                           std::to_string(crc) + "\n";
        break;
      }
    }
  }
  for (const auto& [step, text] : manifests) batch.Put(StepPrefix(step) + "manifest", text);
  const bool ok = db->Write(rocksdb::WriteOptions(), &batch).ok();
  delete db;
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!WriteRecords(data, size)) return 0;
  auto store = SnapshotStore::Open(Folder(), /*keep=*/2);
  if (!store.ok()) return 0;
  std::vector<std::string> problems;
  for (uint64_t step : (*store)->IntactSteps(&problems)) {
    auto chunks = (*store)->Read(step);
    if (!chunks.ok()) std::abort();  // IntactSteps just verified it
  }
  (void)(*store)->Write(300, {ChunkImage{0, 1, {1.0f, 2.0f}}});
  (void)(*store)->IntactSteps(&problems);
  return 0;
}
