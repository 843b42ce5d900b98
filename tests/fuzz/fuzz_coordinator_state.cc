// Fuzz target: what a job reads back from its own disk.
//  - first byte even: the rest is the coordinator's saved state (its RocksDB
//    value), taken up by a restarted coordinator (Bind with restore);
//  - odd: the rest is a snapshot folder's membership-history file, read as
//    een-launch --resume reads it, and turned into data positions as the
//    workers do (PositionAfter).
// Either may be torn, corrupted or written by a stranger: any answer but a
// crash, a hang or an allocation beyond reason.
#include <spdlog/spdlog.h>

#include <atomic>
#include <filesystem>

#include "een/error.h"
#include "een/sampler.h"
#include "fuzz/scratch_path.h"
#include "launcher/coordinator.h"
#include "launcher/membership_log.h"
#include "launcher/state_store.h"

using namespace een;

namespace {

const std::filesystem::path& Folder() {
  static const fuzz::ScratchPath folder("state");
  return folder.path();
}

void TakeUpState(const uint8_t* data, size_t size) {
  const std::string path = (Folder() / "state").string();
  std::filesystem::remove_all(path);
  {
    auto store = StateStore::Open(path);
    if (!store.ok()) return;
    if (!(*store)->Put(std::string(reinterpret_cast<const char*>(data), size)).ok()) return;
  }
  static std::atomic<int> jobs{0};
  CoordinatorOptions o;
  o.listen_address = "mem://fuzz-state-" + std::to_string(++jobs) + "/coordinator";
  o.job.ps = 2;
  o.job.workers = 2;
  o.state_path = path;
  o.restore = true;
  Coordinator coordinator(o);
  (void)coordinator.Bind();
}

void ReadHistory(const uint8_t* data, size_t size) {
  const std::filesystem::path dir = Folder() / "snapshots";
  std::filesystem::create_directories(dir);
  fuzz::WriteInput(dir / "membership-history", data, size);
  auto history = ReadMembershipLog(dir.string());
  if (!history.ok()) return;
  const std::vector<MembershipChange>& changes = *history;
  for (const MembershipChange& e : *history) {
    try {
      (void)PositionAfter(e.step, 4, changes, 60000, 64);
    } catch (const Error&) {  // a history that leaves no worker: refused, as it should be
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] % 2 == 0) {
    TakeUpState(data + 1, size - 1);
  } else {
    ReadHistory(data + 1, size - 1);
  }
  return 0;
}
