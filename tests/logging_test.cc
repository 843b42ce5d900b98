// A flood of refused messages becomes a few counted lines, not a flood.
#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace een {
namespace {

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
