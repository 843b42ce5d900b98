#include "common/transport/shm/shm_device.h"

#include <dirent.h>
#include <sys/mman.h>

#include <cstring>
#include <functional>

#include "common/transport/registry.h"
#include "common/transport/shm/shm_manifest.h"
#include "common/transport/shm/shm_memory.h"
#include "common/transport/shm/shm_segments.h"

namespace een::transport {
namespace {

// "shm:///PATH" -> "ipc:///PATH"
std::string IpcAddress(const std::string& address) { return "ipc://" + address.substr(6); }

// What both ends of a shm channel use: the process's blocks and registered
// regions to pack what it sends, the peers' segments it mapped to unpack
// what it receives.
struct Segments {
  std::shared_ptr<shm::Blocks> blocks;
  std::shared_ptr<shm::Regions> regions;
  std::shared_ptr<shm::Mappings> mappings;

  // Packs `message` and hands it to `send`; the blocks it took stay in use
  // only if the send succeeded.
  Status Send(Message message, const std::function<Status(Message)>& send) const {
    shm::Packer packer(*blocks, *regions);
    EEN_RETURN_IF_ERROR(packer.Pack(message));
    EEN_RETURN_IF_ERROR(send(std::move(message)));
    packer.Sent();
    return Status::Ok();
  }
  Status Unpack(std::vector<Frame>& frames) const { return shm::Unpack(*mappings, frames); }
};

class ShmListener : public Listener {
 public:
  ShmListener(std::unique_ptr<Listener> inner, std::string address, Segments segments)
      : inner_(std::move(inner)), address_(std::move(address)), segments_(std::move(segments)) {}
  const std::string& address() const override { return address_; }
  Result<Envelope> Receive(std::chrono::milliseconds timeout) override {
    auto e = inner_->Receive(timeout);
    if (!e.ok()) return e;
    EEN_RETURN_IF_ERROR(segments_.Unpack(e->message.frames));
    return e;
  }
  Status Send(const PeerId& to, Message message) override {
    return segments_.Send(std::move(message),
                          [&](Message m) { return inner_->Send(to, std::move(m)); });
  }
  void* poll_socket() const override { return inner_->poll_socket(); }
  Result<WritableFrame> NewFrame(size_t size) override { return segments_.blocks->NewFrame(size); }
  bool sends_new_frames_in_place() const override { return true; }

 private:
  std::unique_ptr<Listener> inner_;
  std::string address_;
  Segments segments_;
};

class ShmConnection : public Connection {
 public:
  ShmConnection(std::unique_ptr<Connection> inner, std::string address, Segments segments)
      : inner_(std::move(inner)), address_(std::move(address)), segments_(std::move(segments)) {}
  const std::string& address() const override { return address_; }
  Status Send(Message message) override {
    return segments_.Send(std::move(message),
                          [&](Message m) { return inner_->Send(std::move(m)); });
  }
  Result<Message> Receive(std::chrono::milliseconds timeout) override {
    auto m = inner_->Receive(timeout);
    if (!m.ok()) return m;
    EEN_RETURN_IF_ERROR(segments_.Unpack(m->frames));
    return m;
  }

 private:
  std::unique_ptr<Connection> inner_;
  std::string address_;
  Segments segments_;
};

}  // namespace

ShmDevice::ShmDevice()
    : blocks_(std::make_shared<shm::Blocks>()),
      regions_(std::make_shared<shm::Regions>()),
      mappings_(std::make_shared<shm::Mappings>()) {}
ShmDevice::~ShmDevice() = default;

Result<std::unique_ptr<Listener>> ShmDevice::Listen(const std::string& address) {
  EEN_ASSIGN_OR_RETURN(Device * ipc, DeviceFor(IpcAddress(address)));
  EEN_ASSIGN_OR_RETURN(auto inner, ipc->Listen(IpcAddress(address)));
  return std::unique_ptr<Listener>(
      new ShmListener(std::move(inner), address, {blocks_, regions_, mappings_}));
}

Result<std::unique_ptr<Connection>> ShmDevice::Connect(const std::string& address) {
  EEN_ASSIGN_OR_RETURN(Device * ipc, DeviceFor(IpcAddress(address)));
  EEN_ASSIGN_OR_RETURN(auto inner, ipc->Connect(IpcAddress(address)));
  return std::unique_ptr<Connection>(
      new ShmConnection(std::move(inner), address, {blocks_, regions_, mappings_}));
}

Result<MemoryRegion> ShmDevice::RegisterMemory(void* data, size_t size) {
  // Memory in a /dev/shm file is sent in place; any other is copied as usual.
  return MemoryRegion(data, size, 0, regions_->Add(data, size));
}

Result<RegisteredMemory> ShmDevice::Allocate(size_t bytes, const std::string& tag) {
  EEN_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemory> block, SharedMemory::Create(bytes, tag));
  std::shared_ptr<SharedMemory> memory(std::move(block));
  EEN_ASSIGN_OR_RETURN(MemoryRegion region, RegisterMemory(memory->data(), memory->size()));
  return RegisteredMemory(std::move(memory), std::move(region));
}

void RemoveShmBlocksOf(pid_t pid) {
  const std::string prefix = "een-" + std::to_string(pid) + "-";
  DIR* dir = opendir("/dev/shm");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      shm_unlink(("/" + std::string(e->d_name)).c_str());
    }
  }
  closedir(dir);
}

}  // namespace een::transport
