#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

namespace een {

void InitLogging(const std::string& who) {
  auto logger = spdlog::stderr_logger_mt("een:" + who);
  logger->set_pattern("%H:%M:%S.%e %^%L%$ " + who + ": %v");
  const char* level = std::getenv("EEN_LOG_LEVEL");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

std::string KindOf(const std::string& text) {
  size_t end = 0;
  while (end < text.size() && end < 60 && !std::isdigit(static_cast<unsigned char>(text[end])))
    ++end;
  return text.substr(0, end);
}

void WarnCounted(const std::string& kind, const std::string& text) {
  static std::mutex mu;
  static std::map<std::string, uint64_t> counts;
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (counts.size() > 10000) counts.clear();  // bounded, even with endless kinds
    n = ++counts[kind];
  }
  bool power = n >= 10;
  for (uint64_t k = n; power && k > 1; k /= 10) power = k % 10 == 0;
  if (n <= 3) {
    spdlog::warn("{}", text);
  } else if (power) {
    spdlog::warn("{} ({} such refusals so far; only every power of ten is logged)", text, n);
  }
}

void Ignored(const Status& s, const char* what) {
  if (!s.ok()) spdlog::debug("{} (not acted on): {}", what, s.ToString());
}

}  // namespace een
