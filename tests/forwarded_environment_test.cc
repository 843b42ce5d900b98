// The environment the ssh backend forwards (launcher/forwarded_environment.h):
// what the user set travels, the session's own variables do not, values
// keep every byte, and a lying or endless stdin is refused with a reason.
#include "launcher/forwarded_environment.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace een {
namespace {

// Writes `bytes` into a pipe and reads the list back from it.
Result<EnvironmentEntries> RoundTrip(const std::string& bytes) {
  int fds[2];
  signal(SIGPIPE, SIG_IGN);  // a refused list leaves the writer with EPIPE
  if (pipe(fds) != 0) return Internal("pipe");
  std::thread writer([&] {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = write(fds[1], bytes.data() + at, bytes.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    close(fds[1]);
  });
  auto read = ReadForwardedEnvironment(fds[0]);
  close(fds[0]);
  writer.join();
  return read;
}

TEST(ForwardedEnvironment, WhatTheUserSetTravelsTheSessionsOwnDoesNot) {
  for (const char* name :
       {"OPENBLAS_CORETYPE", "OMP_NUM_THREADS", "PATH", "PYTHONPATH", "LD_LIBRARY_PATH",
        "NCCL_DEBUG", "EEN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES"}) {
    EXPECT_TRUE(IsForwarded(name)) << name;
  }
  for (const char* name : {"HOME", "USER", "SHELL", "PWD", "TERM", "SSH_AUTH_SOCK",
                           "SSH_CONNECTION", "XDG_RUNTIME_DIR", "BASH_FUNC_f%%", "EEN_JOB_SECRET",
                           "EEN_JOB_SECRET_FILE", "", "1X", "A-B"}) {
    EXPECT_FALSE(IsForwarded(name)) << name;
  }
}

TEST(ForwardedEnvironment, ValuesKeepEveryByte) {
  const char* environment[] = {"OPENBLAS_CORETYPE=Haswell",
                               "ODD=two words, 'quotes', \"more\"\nand a second line",
                               "EMPTY=",
                               "HOME=/root",
                               "WITH_EQUALS=a=b=c",
                               nullptr};
  auto read = RoundTrip(EncodeForwardedEnvironment(environment));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, (EnvironmentEntries{{"OPENBLAS_CORETYPE", "Haswell"},
                                       {"ODD", "two words, 'quotes', \"more\"\nand a second line"},
                                       {"EMPTY", ""},
                                       {"WITH_EQUALS", "a=b=c"}}));
}

TEST(ForwardedEnvironment, BadListsAreRefusedNamingWhy) {
  auto cut = RoundTrip(std::string("A=1\0B=2", 7));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("stdin ended"), std::string::npos);
  auto bad_name = RoundTrip(std::string("A-B=1\0\0", 7));
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("'A-B' is not NAME=VALUE"), std::string::npos);
  auto no_value = RoundTrip(std::string("AB\0\0", 4));
  EXPECT_FALSE(no_value.ok());
  auto long_entry = RoundTrip("A=" + std::string(200 * 1024, 'x'));
  ASSERT_FALSE(long_entry.ok());
  EXPECT_NE(long_entry.status().message().find("over 128 KiB"), std::string::npos);
  std::string many;
  for (int i = 0; i < 20; ++i)
    many += "V" + std::to_string(i) + "=" + std::string(100000, 'y') + '\0';
  auto too_much = RoundTrip(many);
  ASSERT_FALSE(too_much.ok());
  EXPECT_NE(too_much.status().message().find("over 1 MiB"), std::string::npos);
}

TEST(ForwardedEnvironment, EnvFlagsForwardWhatTheyNameAndRefuseWhatIsNotTheirs) {
  // --env DISPLAY: asked for, so it travels although it is the session's.
  const char* environment[] = {"DISPLAY=:0", "HOME=/root", "EEN_JOB_SECRET=s", nullptr};
  auto read = RoundTrip(EncodeForwardedEnvironment(environment, {"DISPLAY", "EEN_JOB_SECRET"}));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, (EnvironmentEntries{{"DISPLAY", ":0"}}));  // never the secret

  auto with_value = ParseEnvFlag("NCCL_DEBUG=INFO");
  ASSERT_TRUE(with_value.ok());
  EXPECT_EQ(with_value->first, "NCCL_DEBUG");
  EXPECT_EQ(with_value->second, std::optional<std::string>("INFO"));
  setenv("SET_HERE_X", "1", 1);
  auto name_only = ParseEnvFlag("SET_HERE_X");
  ASSERT_TRUE(name_only.ok());
  EXPECT_FALSE(name_only->second.has_value());
  unsetenv("NOT_SET_HERE_X");
  EXPECT_EQ(ParseEnvFlag("NOT_SET_HERE_X").status().message(),
            "--env NOT_SET_HERE_X: NOT_SET_HERE_X is not set here (give its value: --env "
            "NOT_SET_HERE_X=VALUE)");
  EXPECT_NE(ParseEnvFlag("EEN_RANK=3").status().message().find("een-launch's own"),
            std::string::npos);
  EXPECT_NE(ParseEnvFlag("A-B=1").status().message().find("not NAME or NAME=VALUE"),
            std::string::npos);
}

}  // namespace
}  // namespace een
