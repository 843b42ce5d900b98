#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace een {

Result<spdlog::level::level_enum> LogLevelFromEnvironment() {
  const char* text = std::getenv("EEN_LOG_LEVEL");
  if (!text || !*text) return spdlog::level::info;
  const std::string name = text;
  for (const auto& [level, names] :
       std::initializer_list<std::pair<spdlog::level::level_enum, std::set<std::string>>>{
           {spdlog::level::trace, {"trace"}},
           {spdlog::level::debug, {"debug"}},
           {spdlog::level::info, {"info"}},
           {spdlog::level::warn, {"warn", "warning"}},
           {spdlog::level::err, {"error", "err"}},
           {spdlog::level::critical, {"critical"}},
           {spdlog::level::off, {"off"}}}) {
    if (names.count(name)) return level;
  }
  return InvalidArgument("EEN_LOG_LEVEL '" + name +
                         "' is not a log level: use trace, debug, info, warn, error, critical or "
                         "off (or unset it for info)");
}

Status InitLogging(const std::string& who) {
  auto logger = spdlog::stderr_logger_mt("een:" + who);
  logger->set_pattern("%H:%M:%S.%e %^%L%$ " + who + ": %v");
  auto level = LogLevelFromEnvironment();
  logger->set_level(level.ok() ? *level : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return level.status();
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
