#include "common/transport/auth.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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
  const std::string mac = Hmac(secret, identity);
  if (mac.empty()) return "";
  return Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
}

bool EncryptedAddress(const std::string& address) {
  const Credentials c = CurrentCredentials();
  if (c.secret.empty() || address.rfind("tcp://", 0) != 0) return false;
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

std::string IdentityOfRoutingId(const std::string& routing_id) {
  return routing_id.substr(0, routing_id.find('/'));
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
  // O_NONBLOCK: a FIFO named by mistake fails below instead of blocking here.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return FailedPrecondition("cannot read the job secret file " + path + ": " +
                              std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return FailedPrecondition("the job secret file " + path +
                              " is not a regular file (een-launch writes one in its run folder)");
  }
  if ((st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
    close(fd);
    return FailedPrecondition("the job secret file " + path +
                              " must belong to this user and be readable by it only "
                              "(chmod 600 " +
                              path + ")");
  }
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  std::string secret(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == ' ')) secret.pop_back();
  if (secret.size() < 32 || secret.size() > 128) {
    return FailedPrecondition("the job secret file " + path +
                              " does not hold a secret (32 to 128 characters)");
  }
  return secret;
}

std::string JobTag() { return JobTagOf(CurrentCredentials().secret); }

std::string JobTagOf(const std::string& secret) {
  if (secret.empty()) return "open";
  return PasswordFor(secret, "een-job-tag").substr(0, 12);
}

uint64_t RefusedConnections() { return g_refused_connections.load(); }

}  // namespace een::transport
