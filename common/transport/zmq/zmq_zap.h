// The ZAP handler: ZeroMQ asks it, for every connection to a listener of
// this process, whether the peer may talk (rfc.zeromq.org/spec/27). It
// admits a PLAIN peer whose password is PasswordFor(secret, username) (that
// identity's own key, auth.h) and names the connection by that username
// (each message's "User-Id"), and a CURVE peer whose public key is the
// job's member key (User-Id kCurveMember: the listener takes the identity
// its routing id proves, auth.h's ProvenIdentity); it refuses
// anything else, logging once per peer address. One thread per
// ZeroMQ context, started by the first listener; it lives for the process.
#pragma once

#include <string>
#include <vector>

namespace een::transport {

inline constexpr char kCurveMember[] = "een-curve-member";

// The handler's answer to one ZAP request (its frames: version, request id,
// domain, address, routing id, mechanism, credentials...): whether the peer
// is admitted, the User-Id its messages then carry, and the identity a
// PLAIN peer claimed (peer_text.h's Shown, for the log).
struct ZapAnswer {
  bool admitted = false;
  std::string user;
  std::string claimed;
};

// The decision, for one job's secret (its member key derived once). Any
// frames, none trusted: a request of the wrong shape is refused.
class ZapGate {
 public:
  explicit ZapGate(std::string secret);
  ZapAnswer Answer(const std::vector<std::string>& request) const;

 private:
  std::string secret_;
  std::string member_public_;
};

// Serves ZAP requests on `context` with `secret` (started once per context).
void StartZapHandler(void* context, const std::string& secret);

}  // namespace een::transport
