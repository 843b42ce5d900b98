#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>

namespace een {

void InitLogging(const std::string& who) {
  auto logger = spdlog::stderr_logger_mt("een:" + who);
  logger->set_pattern("%H:%M:%S.%e %^%L%$ " + who + ": %v");
  const char* level = std::getenv("EEN_LOG_LEVEL");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace een
