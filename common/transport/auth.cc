#include "common/transport/auth.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "common/private_file.h"

namespace een::transport {
namespace {

std::mutex g_mu;
Credentials g_credentials;

std::string Hex(const unsigned char* data, size_t n) {
  std::string out(2 * n + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), data, n);
  out.pop_back();
  return out;
}

std::string Hex(const std::string& raw) {
  return Hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

// HMAC-SHA256(secret, text), raw; empty without libsodium.
std::string Hmac(const std::string& secret, const std::string& text) {
  if (sodium_init() < 0) return "";  // no randomness or CPU support: nothing authenticates
  unsigned char key[crypto_auth_hmacsha256_KEYBYTES];
  crypto_hash_sha256(key, reinterpret_cast<const unsigned char*>(secret.data()), secret.size());
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256(mac, reinterpret_cast<const unsigned char*>(text.data()), text.size(),
                         key);
  return std::string(reinterpret_cast<const char*>(mac), sizeof mac);
}

// A Curve25519 key pair whose secret half is HMAC(secret, purpose).
void KeyPair(const std::string& secret, const std::string& purpose, std::string* pub,
             std::string* sec) {
  *sec = Hmac(secret, purpose);
  pub->assign(crypto_scalarmult_BYTES, '\0');
  if (sec->size() != crypto_scalarmult_SCALARBYTES ||
      crypto_scalarmult_base(reinterpret_cast<unsigned char*>(pub->data()),
                             reinterpret_cast<const unsigned char*>(sec->data())) != 0) {
    pub->clear();
    sec->clear();
  }
}

bool LoopbackHost(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "[::1]" || host == "::1";
}

}  // namespace

std::atomic<uint64_t> g_refused_connections{0};

void SetCredentials(Credentials credentials) {
  // EEN_ENCRYPT=1 in the environment of een-launch (inherited by the job's
  // processes) and of eenctl: CURVE on loopback too.
  const char* encrypt = std::getenv("EEN_ENCRYPT");
  if (encrypt && std::strcmp(encrypt, "1") == 0) credentials.encrypt_all = true;
  std::lock_guard<std::mutex> lock(g_mu);
  g_credentials = std::move(credentials);
}

Credentials CurrentCredentials() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_credentials;
}

void SetIdentity(const std::string& identity) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_credentials.identity = identity;
}

std::string PasswordFor(const std::string& secret, const std::string& identity) {
  // Its own namespace: no identity's key is any other key derived from the
  // secret (the CURVE pairs' secret halves, the job tag).
  const std::string mac = Hmac(secret, "een-identity:" + identity);
  if (mac.empty()) return "";
  return Hex(mac);
}

bool EncryptedAddress(const std::string& address) {
  const Credentials c = CurrentCredentials();
  if (!c.authenticates() || address.rfind("tcp://", 0) != 0) return false;
  if (c.encrypt_all) return true;
  std::string host = address.substr(6);
  host = host.substr(0, host.rfind(':'));  // tcp://HOST:PORT, HOST may be [v6]
  return !LoopbackHost(host);
}

CurveKeys CurveKeysOf(const std::string& secret) {
  CurveKeys k;
  KeyPair(secret, "een-curve-server", &k.server_public, &k.server_secret);
  KeyPair(secret, "een-curve-member", &k.member_public, &k.member_secret);
  return k;
}

Credentials OwnCredential(const std::string& secret, const std::string& identity) {
  Credentials c;
  c.identity = identity;
  c.key = PasswordFor(secret, identity);
  c.job_tag = JobTagOf(secret);
  const CurveKeys keys = CurveKeysOf(secret);
  c.curve_member_public = keys.member_public;
  c.curve_member_secret = keys.member_secret;
  c.curve_server_public = keys.server_public;
  return c;
}

namespace {

constexpr char kCredentialHeader[] = "een-credential 1";
constexpr size_t kTagHexDigits = 32;  // 128 bits of the HMAC

std::string RoutingTag(const std::string& key, const std::string& nonce) {
  const std::string mac = Hmac(key, "een-routing-id:" + nonce);
  if (mac.empty()) return "";
  return Hex(mac).substr(0, kTagHexDigits);
}

std::string FromHex(const std::string& hex) {
  std::string out(hex.size() / 2, '\0');
  size_t n = 0;
  if (sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), hex.data(),
                     hex.size(), nullptr, &n, nullptr) != 0 ||
      n != out.size()) {
    return "";
  }
  return out;
}

// The whole of a small file of this user that only it may read: what a
// secret or a credential is kept in. `what` names it in errors ("the job
// secret file"), which never quote its content.
Result<std::string> ReadOwnPrivateFile(const std::string& path, const std::string& what,
                                       const std::string& hint) {
  // O_NONBLOCK: a FIFO named by mistake fails below instead of blocking here.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return FailedPrecondition("cannot read " + what + " " + path + ": " + std::strerror(errno) +
                              " (" + hint + ")");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return FailedPrecondition(what + " " + path + " is not a regular file (" + hint + ")");
  }
  if ((st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
    close(fd);
    return FailedPrecondition(what + " " + path +
                              " must belong to this user and be readable by it only "
                              "(chmod 600 " +
                              path + ")");
  }
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace

Status WriteCredentialFile(const std::string& path, const Credentials& c) {
  if (!c.secret.empty()) return Internal("a credential file never holds the job's secret");
  const std::string text = std::string(kCredentialHeader) + "\nidentity " + c.identity + "\nkey " +
                           c.key + "\njob-tag " + c.job_tag + "\ncurve-member-public " +
                           Hex(c.curve_member_public) + "\ncurve-member-secret " +
                           Hex(c.curve_member_secret) + "\ncurve-server-public " +
                           Hex(c.curve_server_public) + "\n";
  if (Status s = WriteNewPrivateFile(path, text); !s.ok()) {
    return Status(s.code(), "the credential file: " + s.message());
  }
  return Status::Ok();
}

Result<Credentials> ReadCredentialFile(const std::string& path) {
  const std::string what = "the credential file";
  EEN_ASSIGN_OR_RETURN(std::string text,
                       ReadOwnPrivateFile(path, what, "een-launch writes one for each worker"));
  Credentials c;
  std::string member_public, member_secret, server_public;
  std::map<std::string, std::string*> fields = {{"identity", &c.identity},
                                                {"key", &c.key},
                                                {"job-tag", &c.job_tag},
                                                {"curve-member-public", &member_public},
                                                {"curve-member-secret", &member_secret},
                                                {"curve-server-public", &server_public}};
  size_t at = 0, line = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string row = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (line == 1) {
      if (row != kCredentialHeader) break;
      continue;
    }
    const size_t space = row.find(' ');
    auto field = fields.find(row.substr(0, space));
    if (space == std::string::npos || field == fields.end() || !field->second->empty()) {
      return FailedPrecondition(what + " " + path + ", line " + std::to_string(line) +
                                ": not a field of a credential (een-launch writes these files)");
    }
    *field->second = row.substr(space + 1);
  }
  c.curve_member_public = FromHex(member_public);
  c.curve_member_secret = FromHex(member_secret);
  c.curve_server_public = FromHex(server_public);
  if (line == 0 || c.identity.empty() || c.key.size() != 64 || c.job_tag.size() != 12 ||
      c.curve_member_public.size() != 32 || c.curve_member_secret.size() != 32 ||
      c.curve_server_public.size() != 32) {
    return FailedPrecondition(what + " " + path +
                              " does not hold a whole credential (een-launch writes one for "
                              "each worker; is it another file?)");
  }
  return c;
}

std::string ProvingRoutingId(const Credentials& c) {
  const std::string key = c.key.empty() ? PasswordFor(c.secret, c.identity) : c.key;
  const std::string nonce = NewSecret().substr(0, 16);
  return c.identity + "/" + nonce + "/" + RoutingTag(key, nonce);
}

std::string ProvenIdentity(const std::string& secret, const std::string& routing_id) {
  const size_t first = routing_id.find('/');
  const size_t second = routing_id.find('/', first == std::string::npos ? first : first + 1);
  if (first == std::string::npos || second == std::string::npos || secret.empty()) return "";
  const std::string identity = routing_id.substr(0, first);
  const std::string nonce = routing_id.substr(first + 1, second - first - 1);
  const std::string tag = routing_id.substr(second + 1);
  const std::string expected = RoutingTag(PasswordFor(secret, identity), nonce);
  if (expected.empty() || tag.size() != expected.size() ||
      sodium_memcmp(tag.data(), expected.data(), expected.size()) != 0) {
    return "";
  }
  return identity;
}

std::string NewSecret() {
  if (sodium_init() < 0) return "";
  unsigned char bytes[32];
  randombytes_buf(bytes, sizeof bytes);
  return Hex(bytes, sizeof bytes);
}

Status WriteSecretFile(const std::string& path, const std::string& secret) {
  if (Status s = WriteNewPrivateFile(path, secret + "\n"); !s.ok()) {
    return Status(s.code(), "the job secret file: " + s.message());
  }
  return Status::Ok();
}

Result<std::string> ReadSecretFile(const std::string& path) {
  EEN_ASSIGN_OR_RETURN(
      std::string secret,
      ReadOwnPrivateFile(path, "the job secret file", "een-launch writes one in its run folder"));
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == ' ')) secret.pop_back();
  if (secret.size() < 32 || secret.size() > 128) {
    return FailedPrecondition("the job secret file " + path +
                              " does not hold a secret (32 to 128 characters)");
  }
  return secret;
}

std::string JobTag() {
  const Credentials c = CurrentCredentials();
  return c.job_tag.empty() ? JobTagOf(c.secret) : c.job_tag;
}

std::string JobTagOf(const std::string& secret) {
  if (secret.empty()) return "open";
  const std::string mac = Hmac(secret, "een-job-tag");
  if (mac.empty()) return "open";
  return Hex(mac).substr(0, 12);
}

uint64_t RefusedConnections() { return g_refused_connections.load(); }

}  // namespace een::transport
