#include "common/transport/zmq/zmq_listener_set.h"

#include <zmq.h>

#include <chrono>

namespace een::transport {
namespace {

using Clock = std::chrono::steady_clock;

class ListenerSet : public Listener {
 public:
  explicit ListenerSet(std::vector<std::unique_ptr<Listener>> listeners)
      : listeners_(std::move(listeners)) {}
  const std::string& address() const override { return listeners_[0]->address(); }
  void* poll_socket() const override { return nullptr; }  // several: not one to poll

  Result<Envelope> Receive(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      // Whoever has a message now, starting after the last one served (so
      // a busy listener never starves the other).
      for (size_t k = 0; k < listeners_.size(); ++k) {
        const size_t i = (next_ + k) % listeners_.size();
        auto e = listeners_[i]->Receive(std::chrono::milliseconds(0));
        if (e.ok()) {
          next_ = i + 1;
          e->from.insert(e->from.begin(), static_cast<char>(i));
          return e;
        }
        if (e.status().code() != StatusCode::kDeadlineExceeded) return e;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        return DeadlineExceeded("no message within " + std::to_string(timeout.count()) + " ms");
      }
      std::vector<zmq_pollitem_t> items;
      for (const auto& l : listeners_) items.push_back({l->poll_socket(), 0, ZMQ_POLLIN, 0});
      if (zmq_poll(items.data(), static_cast<int>(items.size()), static_cast<long>(left.count())) <
              0 &&
          zmq_errno() != EINTR) {
        return Unavailable(std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
      }
    }
  }

  // The first listener that sends such frames in place makes them (any
  // other sends them as bytes like any frame).
  Result<WritableFrame> NewFrame(size_t size) override {
    for (const auto& l : listeners_) {
      if (l->sends_new_frames_in_place()) return l->NewFrame(size);
    }
    return NewHeapFrame(size);
  }
  bool sends_new_frames_in_place() const override {
    for (const auto& l : listeners_) {
      if (l->sends_new_frames_in_place()) return true;
    }
    return false;
  }

  Status Send(const PeerId& to, Message message) override {
    if (to.empty() || static_cast<unsigned char>(to[0]) >= listeners_.size()) {
      return InvalidArgument("no such peer on this listener set");
    }
    return listeners_[static_cast<unsigned char>(to[0])]->Send(to.substr(1), std::move(message));
  }

 private:
  std::vector<std::unique_ptr<Listener>> listeners_;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<Listener> MakeListenerSet(std::vector<std::unique_ptr<Listener>> listeners) {
  return std::make_unique<ListenerSet>(std::move(listeners));
}

}  // namespace een::transport
