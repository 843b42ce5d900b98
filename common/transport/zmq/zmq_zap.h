// The ZAP handler: ZeroMQ asks it, for every connection to a listener of
// this process, whether the peer may talk (rfc.zeromq.org/spec/27). It
// admits a PLAIN peer whose password is PasswordFor(secret, username) and
// names the connection by that username (each message's "User-Id"), and a
// CURVE peer whose public key is the job's member key (User-Id kCurveMember:
// the listener takes the identity from the peer's routing id); it refuses
// anything else, logging once per peer address. One thread per
// ZeroMQ context, started by the first listener; it lives for the process.
#pragma once

#include <string>

namespace een::transport {

inline constexpr char kCurveMember[] = "een-curve-member";

// Serves ZAP requests on `context` with `secret` (started once per context).
void StartZapHandler(void* context, const std::string& secret);

}  // namespace een::transport
