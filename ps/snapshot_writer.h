// SnapshotWriter: writes a PS's snapshots in the background, so training
// never waits for the disk. The PS captures its chunks (a memcpy of the
// arena) and hands the copy over; one write is in flight at a time, and a
// snapshot due while the previous one is still being written is skipped
// with a log line (the next one catches up). A write that fails (disk
// full, folder gone read-only) is logged once, training goes on, and each
// later snapshot tries again; the first that succeeds says so.
// Thread safety: Submit() and written_step() from the PS thread; the writer
// thread writes the store, and the PS thread may Read() it meanwhile
// (RocksDB allows concurrent reads and writes).
// With a Metrics registry it counts what it did: ps.snapshots_written,
// ps.snapshot_failures, and the last write's ps.snapshot_write_seconds and
// ps.snapshot_bytes (eenctl metrics, /metrics).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/metrics.h"
#include "common/snapshot_store.h"

namespace een::ps {

class SnapshotWriter {
 public:
  // `metrics` (may be null) must outlive the writer.
  explicit SnapshotWriter(std::unique_ptr<SnapshotStore> store, Metrics* metrics = nullptr);
  ~SnapshotWriter();  // finishes the write in flight

  // False (and nothing happens) when a write is still in flight.
  // `stall` is how long capturing the copy held the PS up (for the log).
  bool Submit(uint64_t step, std::vector<ChunkImage> chunks, std::chrono::microseconds stall);
  // The newest step durably written (0: none yet).
  uint64_t written_step() const { return written_step_.load(); }
  SnapshotStore& store() { return *store_; }

 private:
  void Loop();

  std::unique_ptr<SnapshotStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Pending {
    uint64_t step;
    std::vector<ChunkImage> chunks;
    std::chrono::microseconds stall;
  };
  std::optional<Pending> pending_;
  bool busy_ = false;
  bool stop_ = false;
  std::atomic<uint64_t> written_step_{0};
  int failed_in_a_row_ = 0;  // the writer thread's own
  Counter* written_ = nullptr;
  Counter* failures_ = nullptr;
  Gauge* write_seconds_ = nullptr;
  Gauge* bytes_ = nullptr;
  std::thread thread_;
};

}  // namespace een::ps
