// Job credentials: who may talk to this process's sockets.
//
// Every role of a job holds the job's secret (een-launch creates it, a file
// readable by the user only) and an identity ("worker:3", "ps:1",
// "coordinator", "launcher", "eenctl"). With credentials set, every ZeroMQ
// listener admits a connection only after ZeroMQ's ZAP handshake proved the
// peer holds the secret (the PLAIN mechanism with a password derived from
// the secret and the identity by HMAC-SHA256, so the secret itself never
// travels), and every message it then receives carries the identity its
// connection authenticated as (Envelope::authenticated): a role checks that a
// message speaks only for that identity. A listener beyond loopback (any
// tcp address but 127.0.0.0/8, ::1 and localhost; or every tcp listener
// with `encrypt_all`) uses ZeroMQ's CURVE instead: the traffic is encrypted,
// the listener proves it holds the server key and the peer the member key,
// both derived from the secret (so no key travels or needs distributing),
// and the identity is the one the peer announced inside the encrypted
// handshake (its routing id, "worker:3/NONCE"). Refused connections are logged
// once per peer address and counted. Without credentials (unit tests, or a
// job started with --insecure) sockets are open to anyone on the host.
// Thread safety: SetCredentials before the first Listen/Connect of the
// process (a spare PS may change its identity once it has a rank, before it
// connects anew); the rest is safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace een::transport {

struct Credentials {
  std::string secret;        // empty: no authentication
  std::string identity;      // what this process authenticates as
  bool encrypt_all = false;  // CURVE on loopback too; SetCredentials sets it when EEN_ENCRYPT=1
};

void SetCredentials(Credentials credentials);
Credentials CurrentCredentials();
// Changes only the identity (new connections authenticate as it).
void SetIdentity(const std::string& identity);

// The PLAIN password of `identity`: HMAC-SHA256(secret, identity), in hex.
std::string PasswordFor(const std::string& secret, const std::string& identity);

// Whether connections to `address` (a ZeroMQ endpoint) are encrypted (CURVE)
// under the current credentials: tcp beyond loopback, or any tcp with
// encrypt_all; never without a secret, never ipc.
bool EncryptedAddress(const std::string& address);

// The CURVE keys of a job, each 32 raw bytes: Curve25519 key pairs whose
// secret halves are HMAC-SHA256(secret, purpose).
struct CurveKeys {
  std::string server_public, server_secret;  // every listener of the job
  std::string member_public, member_secret;  // every connecting member
};
CurveKeys CurveKeysOf(const std::string& secret);
// The identity a CURVE peer announced in its routing id ("worker:3/NONCE").
std::string IdentityOfRoutingId(const std::string& routing_id);

// A new random secret (32 bytes, hex), and the file that holds one.
std::string NewSecret();
// Writes `secret` to `path`, readable by this user only (0600).
Status WriteSecretFile(const std::string& path, const std::string& secret);
// Reads a secret file; refuses one other users can read, or that is not a secret.
Result<std::string> ReadSecretFile(const std::string& path);

// A short public name of this job (12 hex digits derived from the secret;
// "open" without one): shared-memory objects carry it, and a receiver maps
// only objects that carry its own job's.
std::string JobTag();
std::string JobTagOf(const std::string& secret);

// Connections this process refused (no or wrong secret), since it started.
uint64_t RefusedConnections();

// Identities of the roles.
inline std::string WorkerIdentity(int rank) { return "worker:" + std::to_string(rank); }
inline std::string PsIdentity(int rank) { return "ps:" + std::to_string(rank); }

}  // namespace een::transport
