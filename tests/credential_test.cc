// A process holding only its own credential (auth.h's OwnCredential: what
// een-launch gives each worker) authenticates as that identity and no
// other, under PLAIN (loopback) and CURVE (encrypted) alike, and a refused
// one is told why instead of waiting; it holds no
// secret, cannot listen, and its credential file is refused when it is not
// a whole private credential. AuthenticateAs refuses another rank's file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/job_env.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"

namespace een::transport {
namespace {

using std::chrono::milliseconds;

std::string Hex(const std::string& raw) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

class Credential : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/een-credential-test-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    secret_ = NewSecret();
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    SetCredentials({});
  }

  // A listener of the job (holding its secret, as the coordinator and the
  // PS do) on loopback, encrypted or not; the identity a message from a
  // connection of `as` (a credential, perhaps forged) arrives with, or the
  // error: "refused" when the connection was refused at its handshake,
  // "dropped" when the listener got nothing.
  std::string Authenticated(const Credentials& as, bool encrypted) {
    Credentials listening{secret_, "coordinator"};
    listening.encrypt_all = encrypted;
    SetCredentials(listening);
    auto device = DeviceFor("tcp://127.0.0.1:0");
    if (!device.ok()) return device.status().ToString();
    auto listener = (*device)->Listen("tcp://127.0.0.1:0");
    if (!listener.ok()) return listener.status().ToString();
    const uint64_t refused_before = RefusedConnections();
    Credentials connecting = as;
    connecting.encrypt_all = encrypted;
    SetCredentials(connecting);
    auto connection = (*device)->Connect((*listener)->address());
    if (!connection.ok()) return connection.status().ToString();
    Message m;
    m.frames.push_back(Frame::Copy("hi", 2));
    if (Status s = (*connection)->Send(std::move(m)); !s.ok()) {
      return s.code() == StatusCode::kPermissionDenied ? "refused" : s.ToString();
    }
    // Until the listener gets it, or the connection learns it was refused:
    // at the handshake (PLAIN), or told so by the listener, which dropped
    // its message (a CURVE member that does not prove its identity).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      auto e = (*listener)->Receive(milliseconds(50));
      if (e.ok()) return e->authenticated;
      auto reply = (*connection)->Receive(milliseconds(50));
      if (reply.status().code() == StatusCode::kPermissionDenied) {
        refusal_ = reply.status().message();
        return RefusedConnections() > refused_before ? "refused" : "refused, not counted";
      }
    }
    return "nothing within 20 s";
  }

  std::string dir_;
  std::string secret_;
  std::string refusal_;  // what the last refused connection was told
};

TEST_F(Credential, HoldsNoSecretAndSurvivesItsFile) {
  const Credentials own = OwnCredential(secret_, "worker:3");
  EXPECT_TRUE(own.secret.empty());
  EXPECT_TRUE(own.authenticates());
  EXPECT_EQ(own.key, PasswordFor(secret_, "worker:3"));
  EXPECT_EQ(own.job_tag, JobTagOf(secret_));
  const std::string path = dir_ + "/worker-3";
  ASSERT_TRUE(WriteCredentialFile(path, own).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find(secret_), std::string::npos) << "the file holds the job's secret";
  auto read = ReadCredentialFile(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->identity, "worker:3");
  EXPECT_EQ(read->key, own.key);
  EXPECT_EQ(read->curve_member_secret, own.curve_member_secret);
  EXPECT_EQ(read->curve_server_public, own.curve_server_public);
  // Never over an existing file, and never with a secret in it.
  EXPECT_FALSE(WriteCredentialFile(path, own).ok());
  EXPECT_FALSE(WriteCredentialFile(dir_ + "/with-secret", Credentials{secret_, "worker:3"}).ok());
}

TEST_F(Credential, AFileThatIsNotAWholePrivateCredentialIsRefusedWithoutQuotingIt) {
  const std::string path = dir_ + "/worker-0";
  ASSERT_TRUE(WriteCredentialFile(path, OwnCredential(secret_, "worker:0")).ok());
  chmod(path.c_str(), 0644);
  auto open = ReadCredentialFile(path);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos)
      << open.status().message();
  const std::string secret_file = dir_ + "/secret";
  ASSERT_TRUE(WriteSecretFile(secret_file, secret_).ok());
  auto wrong = ReadCredentialFile(secret_file);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("does not hold a whole credential"), std::string::npos)
      << wrong.status().message();
  EXPECT_EQ(wrong.status().message().find(secret_), std::string::npos);
  auto folder = ReadCredentialFile(dir_);
  EXPECT_FALSE(folder.ok());
}

TEST_F(Credential, AuthenticatesAsItsIdentityAndNoOtherUnderPlainAndCurve) {
  const Credentials own = OwnCredential(secret_, "worker:1");
  for (const bool encrypted : {false, true}) {
    SCOPED_TRACE(encrypted ? "CURVE" : "PLAIN");
    EXPECT_EQ(Authenticated(own, encrypted), "worker:1");
    for (const std::string other : {"worker:0", "ps:0", "launcher", "eenctl", "coordinator"}) {
      Credentials forged = own;
      forged.identity = other;  // worker 1's key, another's name
      EXPECT_EQ(Authenticated(forged, encrypted), "refused") << other;
      EXPECT_NE(refusal_.find("EEN_JOB_CREDENTIAL_FILE is not this identity's"), std::string::npos)
          << refusal_;
    }
    // No other key derived from the secret is an identity's key: the CURVE
    // member pair's secret half (which every worker holds) claimed as the
    // identity of that name is refused too.
    Credentials member = own;
    member.identity = "een-curve-member";
    member.key = Hex(own.curve_member_secret);
    EXPECT_EQ(Authenticated(member, encrypted), "refused");
  }
}

TEST_F(Credential, AProcessWithItsOwnCredentialOnlyCannotListen) {
  SetCredentials(OwnCredential(secret_, "worker:2"));
  auto device = DeviceFor("tcp://127.0.0.1:0");
  ASSERT_TRUE(device.ok());
  auto listener = (*device)->Listen("tcp://127.0.0.1:0");
  ASSERT_FALSE(listener.ok());
  EXPECT_NE(listener.status().message().find("only a role holding the job's secret"),
            std::string::npos)
      << listener.status().message();
}

TEST_F(Credential, AuthenticateAsRefusesAnotherRanksFile) {
  const std::string path = dir_ + "/worker-4";
  ASSERT_TRUE(WriteCredentialFile(path, OwnCredential(secret_, "worker:4")).ok());
  setenv("EEN_JOB_CREDENTIAL_FILE", path.c_str(), 1);
  Status other = AuthenticateAs(WorkerIdentity(5), "this test");
  Status mine = AuthenticateAs(WorkerIdentity(4), "this test");
  unsetenv("EEN_JOB_CREDENTIAL_FILE");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.message().find("'worker:4's"), std::string::npos) << other.message();
  ASSERT_TRUE(mine.ok()) << mine.ToString();
  EXPECT_TRUE(CurrentCredentials().secret.empty());
  EXPECT_EQ(CurrentCredentials().identity, "worker:4");
  EXPECT_EQ(JobTag(), JobTagOf(secret_));
}

}  // namespace
}  // namespace een::transport
