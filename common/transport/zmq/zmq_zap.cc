#include "common/transport/zmq/zmq_zap.h"

#include <sodium.h>
#include <zmq.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "common/transport/auth.h"
#include "common/transport/peer_text.h"

namespace een::transport {

extern std::atomic<uint64_t> g_refused_connections;

namespace {

std::string Part(zmq_msg_t* m) {
  return std::string(static_cast<const char*>(zmq_msg_data(m)), zmq_msg_size(m));
}

// One whole request (every part), or empty on error.
std::vector<std::string> ReceiveRequest(void* socket) {
  std::vector<std::string> parts;
  while (true) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, socket, 0) < 0) {
      zmq_msg_close(&m);
      return {};
    }
    parts.push_back(Part(&m));
    const bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    if (!more) return parts;
  }
}

void SendReply(void* socket, const std::string& request_id, bool ok, const std::string& user) {
  const std::string parts[] = {
      "1.0",          request_id, ok ? "200" : "400", ok ? "OK" : "not a member of this job",
      ok ? user : "", ""};
  for (size_t i = 0; i < 6; ++i) {
    zmq_send(socket, parts[i].data(), parts[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
  }
}

void Serve(void* socket, std::string secret) {
  const ZapGate gate(std::move(secret));
  std::set<std::string> refused_from;  // logged once each
  while (true) {
    std::vector<std::string> r = ReceiveRequest(socket);
    if (r.empty()) continue;
    const ZapAnswer a = gate.Answer(r);
    if (!a.admitted) {
      const uint64_t n = ++g_refused_connections;
      const std::string from = r.size() > 3 && !r[3].empty() ? r[3] : "a local socket";
      if (r.size() >= 6 && refused_from.insert(from).second && refused_from.size() <= 1000) {
        spdlog::warn(
            "refused a connection from {} ({} mechanism{}): it holds no credential of "
            "this job for that identity; further refusals from there are only counted ({} so "
            "far)",
            from, r[5], a.claimed.empty() ? "" : ", claiming '" + a.claimed + "'", n);
      }
    }
    SendReply(socket, r.size() > 1 ? r[1] : "", a.admitted, a.user);
  }
}

}  // namespace

ZapGate::ZapGate(std::string secret)
    : secret_(std::move(secret)),
      member_public_(secret_.empty() ? "" : CurveKeysOf(secret_).member_public) {}

ZapAnswer ZapGate::Answer(const std::vector<std::string>& r) const {
  // version, request id, domain, address, routing id, mechanism, credentials...
  ZapAnswer a;
  if (r.size() < 6 || r[0] != "1.0" || secret_.empty()) return a;
  if (r[5] == "PLAIN" && r.size() == 8) {
    a.claimed = Shown(r[6]);
    const std::string expected = PasswordFor(secret_, r[6]);
    a.admitted = !expected.empty() && r[7].size() == expected.size() &&
                 sodium_memcmp(r[7].data(), expected.data(), expected.size()) == 0;
    if (a.admitted) a.user = r[6];
  } else if (r[5] == "CURVE" && r.size() == 7) {
    // The peer proved it holds the secret half of r[6]; the member key's
    // secret half is derived from the job secret.
    a.admitted = !member_public_.empty() && r[6].size() == member_public_.size() &&
                 sodium_memcmp(r[6].data(), member_public_.data(), member_public_.size()) == 0;
    if (a.admitted) a.user = kCurveMember;
  }
  return a;
}

void StartZapHandler(void* context, const std::string& secret) {
  if (sodium_init() < 0) return;  // PasswordFor fails too: no peer is admitted
  void* socket = zmq_socket(context, ZMQ_REP);
  if (!socket || zmq_bind(socket, "inproc://zeromq.zap.01") != 0) {
    // Bound already: this context has its handler.
    if (socket) zmq_close(socket);
    return;
  }
  std::thread(Serve, socket, secret).detach();  // lives for the process, as the context
}

}  // namespace een::transport
