#include "ps/snapshot_writer.h"

#include <chrono>

#include "common/logging.h"

namespace een::ps {

SnapshotWriter::SnapshotWriter(std::unique_ptr<SnapshotStore> store, Metrics* metrics)
    : store_(std::move(store)) {
  if (metrics) {
    written_ = &metrics->counter("ps.snapshots_written");
    failures_ = &metrics->counter("ps.snapshot_failures");
    write_seconds_ = &metrics->gauge("ps.snapshot_write_seconds");
    bytes_ = &metrics->gauge("ps.snapshot_bytes");
  }
  thread_ = std::thread([this] { Loop(); });
}

SnapshotWriter::~SnapshotWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

bool SnapshotWriter::Submit(uint64_t step, std::vector<ChunkImage> chunks,
                            std::chrono::microseconds stall) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_) return false;
    busy_ = true;
    pending_ = Pending{step, std::move(chunks), stall};
  }
  cv_.notify_one();
  return true;
}

void SnapshotWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return pending_.has_value() || stop_; });
    if (!pending_) return;  // stopping with nothing to write
    auto [step, chunks, stall] = std::move(*pending_);
    pending_.reset();
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    Status s = store_->Write(step, chunks);
    if (!s.ok() && failures_) failures_->Add();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    if (s.ok()) {
      written_step_ = step;
      size_t bytes = 0;
      for (const ChunkImage& c : chunks) bytes += c.data.size() * sizeof(float);
      if (written_) {
        written_->Add();
        write_seconds_->Set(static_cast<double>(ms) / 1000);
        bytes_->Set(static_cast<double>(bytes));
      }
      if (failed_in_a_row_ > 0) {
        spdlog::warn("snapshots are written again: step {} is in {} after {} failed write(s)", step,
                     store_->path(), failed_in_a_row_);
        failed_in_a_row_ = 0;
      }
      spdlog::info(
          "snapshot of step {} written to {}: {} chunks, {} bytes; training paused "
          "{} us to copy them, the write took {} ms in the background",
          step, store_->path(), chunks.size(), bytes, stall.count(), ms);
    } else if (failed_in_a_row_++ == 0) {
      // Said once: a full disk fails every write until space is freed.
      const uint64_t newest = written_step_.load();
      spdlog::error(
          "snapshot of step {} not written: {}; training goes on without new "
          "snapshots ({}) and each one due tries again: free space in, or fix, {}",
          step, s.message(),
          newest ? fmt::format("the one of step {} stays the newest: --resume finds it", newest)
                 : std::string("this run has written none yet"),
          store_->path());
    } else {
      spdlog::debug("snapshot of step {} not written either: {}", step, s.message());
    }
    lock.lock();
    busy_ = false;
  }
}

}  // namespace een::ps
