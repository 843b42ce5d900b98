// Job credentials: who may talk to this process's sockets.
//
// Every process of a job has an identity ("worker:3", "ps:1", "coordinator",
// "launcher", "eenctl") and a credential for it. The roles that admit
// others (the coordinator and the PS, which listen) and een-launch and
// eenctl hold the job's secret (een-launch creates it, a file readable by
// the user only). A worker holds only its own credential (OwnCredential:
// its identity's key (PasswordFor), and the public parts
// every member needs), in a file een-launch writes for it: it cannot
// compute another identity's key, so it can authenticate as itself only.
// With credentials set, every ZeroMQ listener admits a connection only
// after ZeroMQ's ZAP handshake proved the peer holds a credential of this
// job (PLAIN: the identity and its key as the password, so the secret
// itself never travels), and every message it then receives carries the
// identity its connection authenticated as (Envelope::authenticated): a
// role checks that a message speaks only for that identity. A listener
// beyond loopback (any tcp address but 127.0.0.0/8, ::1 and localhost; or
// every tcp listener with `encrypt_all`) uses ZeroMQ's CURVE instead: the
// traffic is encrypted, the listener proves it holds the server key and
// the peer the member key (both derived from the secret), and the peer
// proves its identity inside the encrypted handshake: its routing id
// "IDENTITY/NONCE/TAG" carries TAG = HMAC(its key, NONCE), which the
// listener checks (ProvenIdentity) before it reads any message of that
// connection. Refused connections are logged once per peer address and
// counted. Without credentials (unit tests, or a job started with
// --insecure) sockets are open to anyone on the host.
// Thread safety: SetCredentials before the first Listen/Connect of the
// process (a spare PS may change its identity once it has a rank, before it
// connects anew); the rest is safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace een::transport {

struct Credentials {
  std::string secret;        // the job's secret; empty in a process holding its own credential only
  std::string identity;      // what this process authenticates as
  bool encrypt_all = false;  // CURVE on loopback too; SetCredentials sets it when EEN_ENCRYPT=1
  // A process without the secret (OwnCredential) holds these instead; with
  // the secret they are derived from it.
  std::string key;                  // PasswordFor(secret, identity)
  std::string job_tag;              // JobTagOf(secret)
  std::string curve_member_public;  // CurveKeysOf(secret): the member pair and the
  std::string curve_member_secret;  // listeners' public key, 32 raw bytes each
  std::string curve_server_public;

  // Whether this process authenticates at all (else: --insecure, unit tests).
  bool authenticates() const { return !secret.empty() || !key.empty(); }
};

// The credential of `identity` alone: no secret, so whoever holds it can
// authenticate as `identity` only. een-launch gives each worker its own.
Credentials OwnCredential(const std::string& secret, const std::string& identity);
// A credential file (written 0600, never over an existing file; read only
// if it is a regular file of this user, readable by it only). It holds no
// secret: `credentials` must be an OwnCredential.
Status WriteCredentialFile(const std::string& path, const Credentials& credentials);
Result<Credentials> ReadCredentialFile(const std::string& path);

void SetCredentials(Credentials credentials);
Credentials CurrentCredentials();
// Changes only the identity (new connections authenticate as it).
void SetIdentity(const std::string& identity);

// The key of `identity` (its PLAIN password, and what its CURVE routing
// id's proof is made with): HMAC-SHA256(secret, "een-identity:" + identity),
// in hex. The prefix keeps it apart from every other key derived from the
// secret: no identity's key is a CURVE secret half or another's key.
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
// The routing id a connection announces inside an encrypted handshake:
// "IDENTITY/NONCE/TAG", a fresh NONCE per connection, TAG = HMAC(key, NONCE).
std::string ProvingRoutingId(const Credentials& credentials);
// The identity such a routing id proves, checked with the job's secret;
// empty when its tag is not that identity's (a member claiming another).
std::string ProvenIdentity(const std::string& secret, const std::string& routing_id);

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
