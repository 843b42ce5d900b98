// Process-wide logging setup (spdlog): one line per event on stderr, with
// time, level and the role ("ps 1", "worker 3", "coordinator").
// een-launch prefixes each child's lines again with its role, so a merged
// log still says who spoke. Thread safe after InitLogging().
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace een {

// Sets the default logger's pattern; EEN_LOG_LEVEL (trace..error) sets the level.
void InitLogging(const std::string& who);

}  // namespace een
