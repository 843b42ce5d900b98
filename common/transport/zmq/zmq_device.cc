#include "common/transport/zmq/zmq_device.h"

#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "common/logging.h"
#include "common/transport/auth.h"
#include "common/transport/peer_text.h"
#include "common/transport/zmq/zmq_monitor.h"
#include "common/transport/zmq/zmq_parts.h"
#include "common/transport/zmq/zmq_zap.h"

namespace een::transport {

extern std::atomic<uint64_t> g_refused_connections;

namespace {

constexpr size_t kZeroCopyMin = 256;
// Consecutive handshakes a CURVE listener ended without a word before a
// connection takes it as a refusal (a peer that died mid-handshake ends one).
constexpr int kDroppedHandshakesRefused = 10;
const std::string kMechanismHint =
    "one side runs without a job secret (--insecure / EEN_INSECURE=1) and the other with one, "
    "or one side encrypts (a listener beyond loopback, or EEN_ENCRYPT=1) and the other not";

// What a listener sends, once, to a CURVE member whose routing id does not
// prove the identity it names (its messages are dropped): one frame, this
// marker then the reason. No message of the job starts so (a Cap'n Proto
// header's first word is its segment count, never 0xff...). The member's
// connection then fails with the reason instead of waiting for answers.
const std::string kRefusalMarker =
    "\xff"
    "een-refused"
    "\xff";
const std::string kUnprovenReason =
    "names an identity its credential does not prove: EEN_JOB_CREDENTIAL_FILE is not this "
    "identity's credential (een-launch writes each worker its own), or not this job's";

std::string ZmqError(const char* what) {
  return std::string(what) + ": " + zmq_strerror(zmq_errno());
}

void ReleaseOwner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

// Sends every frame of `message` (a frame of kMaxPart bytes or more as
// consecutive parts, zmq_parts.h), the last part without ZMQ_SNDMORE. With
// ZMQ_DONTWAIT in `flags`, ResourceExhausted when nothing could be sent now
// (no peer connected): the frames are untouched then.
Status SendFrames(void* socket, Message& message, int flags = 0) {
  const size_t n = message.frames.size();
  bool first = true;
  for (size_t i = 0; i < n; ++i) {
    const Frame& f = message.frames[i];
    const size_t parts = PartsOf(f.size());
    for (size_t p = 0; p < parts; ++p) {
      const size_t offset = p * kMaxPart;
      const size_t size = std::min(kMaxPart, f.size() - offset);
      const std::byte* data = f.data() + offset;
      zmq_msg_t msg;
      int rc;
      if (size >= kZeroCopyMin && f.owner()) {
        auto* hint = new std::shared_ptr<const void>(f.owner());
        rc = zmq_msg_init_data(&msg, const_cast<std::byte*>(data), size, ReleaseOwner, hint);
        if (rc != 0) delete hint;
      } else {
        rc = zmq_msg_init_size(&msg, size);
        if (rc == 0 && size > 0) std::memcpy(zmq_msg_data(&msg), data, size);
      }
      if (rc != 0) return Internal(ZmqError("zmq_msg_init"));
      const bool last = i + 1 == n && p + 1 == parts;
      if (zmq_msg_send(&msg, socket, (last ? 0 : ZMQ_SNDMORE) | (first ? flags : 0)) < 0) {
        int err = zmq_errno();
        zmq_msg_close(&msg);
        if (err == EAGAIN && first) return ResourceExhausted("no peer connected yet");
        if (err == EHOSTUNREACH) return Unavailable("peer is not connected");
        return Unavailable(std::string("zmq send failed: ") + zmq_strerror(err));
      }
      first = false;
    }
  }
  return Status::Ok();
}

// Receives one whole multipart message, each frame zero-copy unless it came
// in parts (zmq_parts.h); `user` (if given) gets the identity the sender's
// connection authenticated as. A message whose parts do not make whole
// frames, or whose frame is over kMaxFrame, is consumed and refused.
Result<std::vector<Frame>> ReceiveFrames(void* socket, std::chrono::milliseconds timeout,
                                         std::string* user = nullptr) {
  zmq_pollitem_t item{socket, 0, ZMQ_POLLIN, 0};
  int rc = zmq_poll(&item, 1, static_cast<long>(timeout.count()));
  if (rc < 0) {
    if (zmq_errno() == EINTR) return DeadlineExceeded("interrupted");
    return Unavailable(ZmqError("zmq_poll"));
  }
  if (rc == 0)
    return DeadlineExceeded("no message within " + std::to_string(timeout.count()) + " ms");
  std::vector<Frame> frames;
  FrameAssembler assembler;
  while (true) {
    std::shared_ptr<zmq_msg_t> owner(new zmq_msg_t, [](zmq_msg_t* m) {
      zmq_msg_close(m);
      delete m;
    });
    zmq_msg_init(owner.get());
    if (zmq_msg_recv(owner.get(), socket, 0) < 0) return Unavailable(ZmqError("zmq receive"));
    const bool more = zmq_msg_more(owner.get());
    if (user && user->empty()) {
      if (const char* id = zmq_msg_gets(owner.get(), "User-Id")) *user = id;
    }
    void* data = zmq_msg_data(owner.get());
    size_t size = zmq_msg_size(owner.get());
    assembler.Add(Frame::Borrow(data, size, std::shared_ptr<const void>(owner, data)), &frames);
    if (!more) break;
  }
  EEN_RETURN_IF_ERROR(assembler.Finish());
  return frames;
}

void* OpenSocket(void* context, int type) {
  void* s = zmq_socket(context, type);
  if (!s) return nullptr;
  int zero = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);  // never drop: flow control is ours
  zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
  // No part is over kMaxPart (zmq_parts.h): a peer declaring more, before
  // or after authentication, is disconnected before anything is allocated.
  const int64_t max_part = static_cast<int64_t>(kMaxPart);
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_part, sizeof max_part);
  // A peer that has not proved it holds the job's credentials within this
  // time is disconnected (ZeroMQ's default: 30 s).
  const int handshake_ms = 10000;
  zmq_setsockopt(s, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof handshake_ms);
  // EEN_SOCKET_BUFFER=BYTES fixes the kernel socket buffers (default: the
  // kernel's autotuning). On loopback, 4 MiB measured 103 vs 109 ms per
  // ResNet-50 step with 1+1 (median of 5 alternating runs) but 210 vs 197 ms
  // with 2+2 (3 runs): no better default here; a long fat network may want it.
  int bytes = 0;
  if (const char* b = std::getenv("EEN_SOCKET_BUFFER")) bytes = std::atoi(b);
  if (bytes > 0) {
    zmq_setsockopt(s, ZMQ_SNDBUF, &bytes, sizeof bytes);
    zmq_setsockopt(s, ZMQ_RCVBUF, &bytes, sizeof bytes);
  }
  return s;
}

// Refused connections: once per listener and kind in the log, all counted.
// A peer without credentials often sees the mechanism mismatch first and
// hangs up, so this side sees the handshake dropped (EPIPE), not the
// mismatch: that too is a connection never admitted.
void NoteRefused(const std::string& listener, const HandshakeMonitor::Event& e) {
  static std::mutex mu;
  static std::set<std::string> logged;
  // A wrong PLAIN secret: the ZAP handler logged it.
  if (!e.mismatch && !e.crypto && !e.dropped) return;
  ++g_refused_connections;
  const char* kind = e.crypto ? "/key" : e.mismatch ? "/mechanism" : "/dropped";
  std::lock_guard<std::mutex> lock(mu);
  if (logged.size() < 1000 && logged.insert(listener + e.address + kind).second) {
    std::string why;
    if (e.crypto) {
      why =
          "that does not hold this job's secret (its encrypted handshake does not open "
          "with the job's key)";
    } else if (e.mismatch) {
      why = "without this job's credentials or mechanism (" + kMechanismHint + ")";
    } else {
      why =
          "that hung up during the handshake, before proving it holds this job's secret "
          "(a peer without this job's credentials or mechanism, or one that stopped)";
    }
    spdlog::warn(
        "refused a connection on {} from a peer {}; further refusals are only counted "
        "({} so far)",
        listener, why, RefusedConnections());
  }
}

// The identities CURVE peers' routing ids proved (ProvenIdentity), so each
// routing id is checked once, not per message. Bounded: past 65,536 routing
// ids it forgets them all and checks anew.
class ProvenRoutingIds {
 public:
  std::string Identity(const std::string& secret, const std::string& routing_id) {
    auto it = proven_.find(routing_id);
    if (it != proven_.end()) return it->second;
    std::string identity = ProvenIdentity(secret, routing_id);
    if (identity.empty()) return identity;
    if (proven_.size() >= 65536) proven_.clear();
    proven_.emplace(routing_id, identity);
    return identity;
  }

 private:
  std::unordered_map<std::string, std::string> proven_;
};

// A member whose routing id does not prove the identity it names (a worker
// claiming another's): each message is dropped, logged once per identity.
void NoteUnproven(const std::string& listener, const std::string& routing_id) {
  static std::mutex mu;
  static std::set<std::string> logged;
  ++g_refused_connections;
  const std::string claimed = Shown(routing_id.substr(0, routing_id.find('/')));
  std::lock_guard<std::mutex> lock(mu);
  if (logged.size() < 1000 && logged.insert(listener + "/" + claimed).second) {
    spdlog::warn(
        "refused messages on {} from a member claiming to be '{}' without that identity's "
        "credential (another process of the job speaking for it?); further refusals are only "
        "counted ({} so far)",
        listener, claimed, RefusedConnections());
  }
}

class ZmqListener : public Listener {
 public:
  ZmqListener(void* socket, std::string address, std::unique_ptr<HandshakeMonitor> monitor,
              std::string secret)
      : socket_(socket),
        address_(std::move(address)),
        monitor_(std::move(monitor)),
        secret_(std::move(secret)) {}
  ~ZmqListener() override {
    monitor_.reset();
    zmq_close(socket_);
  }
  const std::string& address() const override { return address_; }

  Result<Envelope> Receive(std::chrono::milliseconds timeout) override {
    if (monitor_) {
      for (const auto& e : monitor_->Drain()) {
        if (!e.succeeded) NoteRefused(address_, e);
      }
    }
    std::string user;
    EEN_ASSIGN_OR_RETURN(std::vector<Frame> frames, ReceiveFrames(socket_, timeout, &user));
    if (frames.size() < 2) return InvalidArgument("message without routing id or header");
    Envelope e;
    e.from = frames[0].ToString();
    // Listening with CURVE, User-Id is kCurveMember and the identity is the
    // one the peer proved in its routing id, inside the encrypted handshake.
    if (user == kCurveMember) {
      e.authenticated = proven_.Identity(secret_, e.from);
      if (e.authenticated.empty()) {
        NoteUnproven(address_, e.from);
        TellUnproven(e.from);
        return DeadlineExceeded("a message from a member that did not prove its identity");
      }
    } else {
      e.authenticated = std::move(user);
    }
    e.message.frames.assign(std::make_move_iterator(frames.begin() + 1),
                            std::make_move_iterator(frames.end()));
    return e;
  }

  Status Send(const PeerId& to, Message message) override {
    message.frames.insert(message.frames.begin(), Frame::Copy(to.data(), to.size()));
    return SendFrames(socket_, message);
  }
  void* poll_socket() const override { return socket_; }

 private:
  // Once per routing id (bounded): the member learns why it gets no answer.
  void TellUnproven(const std::string& routing_id) {
    if (told_.size() >= 4096) told_.clear();
    if (!told_.insert(routing_id).second) return;
    Message refusal;
    const std::string text = kRefusalMarker + kUnprovenReason;
    refusal.frames.push_back(Frame::Copy(text.data(), text.size()));
    Ignored(Send(routing_id, std::move(refusal)), "telling a member its identity is not proven");
  }

  void* socket_;
  std::string address_;
  std::unique_ptr<HandshakeMonitor> monitor_;
  std::string secret_;
  ProvenRoutingIds proven_;
  std::set<std::string> told_;  // routing ids told they are refused
};

class ZmqConnection : public Connection {
 public:
  ZmqConnection(void* socket, std::string address, std::unique_ptr<HandshakeMonitor> monitor,
                bool encrypted)
      : socket_(socket),
        address_(std::move(address)),
        monitor_(std::move(monitor)),
        encrypted_(encrypted) {}
  ~ZmqConnection() override {
    monitor_.reset();
    zmq_close(socket_);
  }
  const std::string& address() const override { return address_; }
  // Never blocks for good: while no peer is connected it retries, and fails
  // once the peer refused this process's credentials or after 30 s.
  Status Send(Message message) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (true) {
      Status s = SendFrames(socket_, message, ZMQ_DONTWAIT);
      if (s.code() != StatusCode::kResourceExhausted) return s;
      EEN_RETURN_IF_ERROR(Handshake());
      if (std::chrono::steady_clock::now() > deadline) {
        return Unavailable("cannot send to " + address_ + ": no connection to it for 30 s");
      }
      zmq_pollitem_t item{socket_, 0, ZMQ_POLLOUT, 0};
      zmq_poll(&item, 1, 50);
    }
  }
  // Fails early once the peer refused this process's credentials.
  Result<Message> Receive(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto frames = ReceiveFrames(
          socket_, std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(200)));
      if (frames.ok()) {
        const Frame* first = frames->size() == 1 ? &(*frames)[0] : nullptr;
        if (first && first->size() >= kRefusalMarker.size() &&
            std::memcmp(first->data(), kRefusalMarker.data(), kRefusalMarker.size()) == 0) {
          refused_ = "the peer at " + address_ + " refused this connection: it " +
                     Shown(first->ToString().substr(kRefusalMarker.size()), 300);
          return PermissionDenied(refused_);
        }
        return Message{std::move(frames).value()};
      }
      EEN_RETURN_IF_ERROR(Handshake());
      if (frames.status().code() != StatusCode::kDeadlineExceeded || left.count() <= 200) {
        return frames.status();
      }
    }
  }

 private:
  // PermissionDenied once the peer refused our credentials (until a later
  // handshake succeeds).
  Status Handshake() {
    if (!monitor_) return Status::Ok();
    for (const auto& e : monitor_->Drain()) {
      if (e.succeeded) {
        refused_.clear();
        dropped_ = 0;
      } else if (e.auth || e.mismatch) {  // definitive; anything else: a reconnect may succeed
        refused_ = e.auth ? "the peer at " + address_ +
                                " refused this process's credentials: EEN_JOB_SECRET_FILE is "
                                "not this job's secret, or EEN_JOB_CREDENTIAL_FILE is not this "
                                "identity's credential"
                          : "no handshake with the peer at " + address_ + ": " + kMechanismHint;
      } else if (e.dropped && encrypted_ && ++dropped_ >= kDroppedHandshakesRefused) {
        refused_ = "the peer at " + address_ + " ended " + std::to_string(dropped_) +
                   " encrypted handshakes in a row: it is not this job's, or "
                   "EEN_JOB_SECRET_FILE is not this job's secret (or EEN_JOB_CREDENTIAL_FILE "
                   "not this job's credential)";
      }
    }
    return refused_.empty() ? Status::Ok() : PermissionDenied(refused_);
  }

  void* socket_;
  std::string address_;
  std::unique_ptr<HandshakeMonitor> monitor_;
  bool encrypted_;
  int dropped_ = 0;  // consecutive handshakes the peer ended without a word
  std::string refused_;
};

}  // namespace

ZmqDevice::ZmqDevice() : context_(zmq_ctx_new()) {}
ZmqDevice::~ZmqDevice() { zmq_ctx_term(context_); }

Result<std::unique_ptr<Listener>> ZmqDevice::Listen(const std::string& address) {
  std::string bind = address;
  if (bind.size() > 2 && bind.compare(bind.size() - 2, 2, ":0") == 0) {
    bind.replace(bind.size() - 1, 1, "*");
  }
  void* s = OpenSocket(context_, ZMQ_ROUTER);
  if (!s) return Internal(ZmqError("zmq_socket"));
  int one = 1;
  zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  const Credentials credentials = CurrentCredentials();
  if (credentials.authenticates() && credentials.secret.empty()) {
    zmq_close(s);
    return FailedPrecondition("cannot listen on " + address + " as '" + credentials.identity +
                              "': only a role holding the job's secret admits others "
                              "(this process holds its own credential only)");
  }
  if (!credentials.secret.empty()) {  // only peers holding a credential of this job get in
    StartZapHandler(context_, credentials.secret);
    const char domain[] = "een";
    zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, domain, sizeof domain - 1);
    if (EncryptedAddress(address)) {
      const CurveKeys keys = CurveKeysOf(credentials.secret);
      if (keys.server_secret.empty()) {
        zmq_close(s);
        return Internal("cannot derive the job's CURVE keys (libsodium failed to start)");
      }
      zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one);
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, keys.server_secret.data(), keys.server_secret.size());
    } else {
      zmq_setsockopt(s, ZMQ_PLAIN_SERVER, &one, sizeof one);
    }
  }
  auto monitor = std::make_unique<HandshakeMonitor>(context_, s);
  if (zmq_bind(s, bind.c_str()) != 0) {
    std::string msg = ZmqError(("cannot listen on " + address).c_str());
    zmq_close(s);
    return Unavailable(msg + " (is the address in use or malformed?)");
  }
  char endpoint[256];
  size_t len = sizeof endpoint;
  zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, endpoint, &len);
  return std::unique_ptr<Listener>(
      new ZmqListener(s, endpoint, std::move(monitor), credentials.secret));
}

Result<std::unique_ptr<Connection>> ZmqDevice::Connect(const std::string& address) {
  void* s = OpenSocket(context_, ZMQ_DEALER);
  if (!s) return Internal(ZmqError("zmq_socket"));
  int ms = 100;  // quick reconnects: a restarted peer is found again fast
  zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ms, sizeof ms);
  const Credentials credentials = CurrentCredentials();
  const bool encrypted = EncryptedAddress(address);
  if (encrypted) {
    CurveKeys keys;
    if (!credentials.secret.empty()) {
      keys = CurveKeysOf(credentials.secret);
    } else {  // its own credential: the public parts every member holds
      keys.server_public = credentials.curve_server_public;
      keys.member_public = credentials.curve_member_public;
      keys.member_secret = credentials.curve_member_secret;
    }
    if (keys.member_secret.empty()) {
      zmq_close(s);
      return Internal("cannot derive the job's CURVE keys (libsodium failed to start)");
    }
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, keys.server_public.data(), keys.server_public.size());
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, keys.member_public.data(), keys.member_public.size());
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, keys.member_secret.data(), keys.member_secret.size());
    // The identity and its proof travel inside the encrypted handshake; the
    // nonce keeps every socket's routing id unique (a restarted rank, two
    // connections) and the proof fresh.
    const std::string routing_id = ProvingRoutingId(credentials);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, routing_id.data(), routing_id.size());
  } else if (credentials.authenticates()) {
    const std::string password = credentials.key.empty()
                                     ? PasswordFor(credentials.secret, credentials.identity)
                                     : credentials.key;
    zmq_setsockopt(s, ZMQ_PLAIN_USERNAME, credentials.identity.data(), credentials.identity.size());
    zmq_setsockopt(s, ZMQ_PLAIN_PASSWORD, password.data(), password.size());
  }
  auto monitor = std::make_unique<HandshakeMonitor>(context_, s);
  if (zmq_connect(s, address.c_str()) != 0) {
    std::string msg = ZmqError(("cannot connect to " + address).c_str());
    zmq_close(s);
    return InvalidArgument(msg);
  }
  return std::unique_ptr<Connection>(new ZmqConnection(s, address, std::move(monitor), encrypted));
}

Result<MemoryRegion> ZmqDevice::RegisterMemory(void* data, size_t size) {
  return MemoryRegion(data, size, 0, nullptr);
}

}  // namespace een::transport
