// A flood of refused messages becomes a few counted lines, not a flood.
#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

namespace een {
namespace {

// EEN_LOG_LEVEL: the documented names, and an error naming them for a typo
// (spdlog alone would turn logging off).
TEST(Logging, AnUnknownLogLevelIsAnErrorNamingTheValidOnes) {
  for (const auto& [text, level] : std::vector<std::pair<std::string, spdlog::level::level_enum>>{
           {"", spdlog::level::info},
           {"debug", spdlog::level::debug},
           {"warn", spdlog::level::warn},
           {"warning", spdlog::level::warn},
           {"off", spdlog::level::off}}) {
    setenv("EEN_LOG_LEVEL", text.c_str(), 1);
    auto got = LogLevelFromEnvironment();
    ASSERT_TRUE(got.ok()) << text;
    EXPECT_EQ(*got, level) << text;
  }
  setenv("EEN_LOG_LEVEL", "verbose", 1);
  auto bad = LogLevelFromEnvironment();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("use trace, debug, info, warn, error, critical or off"),
            std::string::npos)
      << bad.status().message();
  unsetenv("EEN_LOG_LEVEL");
}

TEST(Logging, RefusalsAreCountedNotEchoed) {
  std::ostringstream out;
  auto logger = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  logger->set_pattern("%v");
  spdlog::set_default_logger(logger);
  for (int i = 0; i < 1500; ++i) {
    const std::string text = "push for chunk " + std::to_string(i) + " refused";
    WarnCounted(KindOf(text), text);
  }
  WarnCounted(KindOf("another kind"), "another kind");
  const std::string log = out.str();
  size_t lines = 0;
  for (char c : log) lines += c == '\n';
  EXPECT_EQ(lines, 3u + 3u + 1u) << log;  // 3 whole, the 10th/100th/1000th, the other kind
  EXPECT_NE(log.find("push for chunk 999 refused (1000 such refusals so far"), std::string::npos)
      << log;
  EXPECT_NE(log.find("another kind"), std::string::npos) << log;
}

}  // namespace
}  // namespace een
