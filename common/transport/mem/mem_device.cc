#include "common/transport/mem/mem_device.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

namespace een::transport {

// A queue of envelopes that one side waits on.
class MemMailbox {
 public:
  void Put(Envelope e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  Result<Envelope> Take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) {
      return DeadlineExceeded("no message within " + std::to_string(timeout.count()) + " ms");
    }
    Envelope e = std::move(queue_.front());
    queue_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Envelope> queue_;
};

// Every live mailbox by name: listeners under their address, connections
// under their peer id.
class MemHub {
 public:
  bool Add(const std::string& name, std::shared_ptr<MemMailbox> box) {
    std::lock_guard<std::mutex> lock(mu_);
    return boxes_.emplace(name, std::move(box)).second;
  }
  void Remove(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    boxes_.erase(name);
  }
  std::shared_ptr<MemMailbox> Find(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = boxes_.find(name);
    return it == boxes_.end() ? nullptr : it->second;
  }
  std::string NewPeerId() { return "peer/" + std::to_string(next_peer_++); }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<MemMailbox>> boxes_;
  std::atomic<uint64_t> next_peer_{1};
};

namespace {

class MemListener : public Listener {
 public:
  MemListener(std::shared_ptr<MemHub> hub, std::string address, std::shared_ptr<MemMailbox> box)
      : hub_(std::move(hub)), address_(std::move(address)), box_(std::move(box)) {}
  ~MemListener() override { hub_->Remove(address_); }
  const std::string& address() const override { return address_; }
  Result<Envelope> Receive(std::chrono::milliseconds timeout) override {
    return box_->Take(timeout);
  }
  Status Send(const PeerId& to, Message message) override {
    auto peer = hub_->Find(to);
    if (!peer) return Unavailable("peer " + to + " is not connected");
    peer->Put(Envelope{address_, std::move(message)});
    return Status::Ok();
  }

 private:
  std::shared_ptr<MemHub> hub_;
  std::string address_;
  std::shared_ptr<MemMailbox> box_;
};

class MemConnection : public Connection {
 public:
  MemConnection(std::shared_ptr<MemHub> hub, std::string address)
      : hub_(std::move(hub)),
        address_(std::move(address)),
        id_(hub_->NewPeerId()),
        box_(std::make_shared<MemMailbox>()) {
    hub_->Add(id_, box_);
  }
  ~MemConnection() override { hub_->Remove(id_); }
  const std::string& address() const override { return address_; }
  Status Send(Message message) override {
    auto listener = hub_->Find(address_);
    if (!listener) return Unavailable("nothing listens on " + address_);
    listener->Put(Envelope{id_, std::move(message)});
    return Status::Ok();
  }
  Result<Message> Receive(std::chrono::milliseconds timeout) override {
    EEN_ASSIGN_OR_RETURN(Envelope e, box_->Take(timeout));
    return std::move(e.message);
  }

 private:
  std::shared_ptr<MemHub> hub_;
  std::string address_;
  std::string id_;
  std::shared_ptr<MemMailbox> box_;
};

}  // namespace

MemDevice::MemDevice() : hub_(std::make_shared<MemHub>()) {}
MemDevice::~MemDevice() = default;

Result<std::unique_ptr<Listener>> MemDevice::Listen(const std::string& address) {
  auto box = std::make_shared<MemMailbox>();
  if (!hub_->Add(address, box)) return Unavailable("address " + address + " is already in use");
  return std::unique_ptr<Listener>(new MemListener(hub_, address, box));
}

Result<std::unique_ptr<Connection>> MemDevice::Connect(const std::string& address) {
  return std::unique_ptr<Connection>(new MemConnection(hub_, address));
}

Result<MemoryRegion> MemDevice::RegisterMemory(void* data, size_t size) {
  return MemoryRegion(data, size, 0, nullptr);
}

}  // namespace een::transport
