// Process-wide logging setup (spdlog): one line per event on stderr, with
// time, level and the role ("ps 1", "worker 3", "coordinator").
// een-launch prefixes each child's lines again with its role, so a merged
// log still says who spoke. Thread safe after InitLogging().
#pragma once

#include <spdlog/spdlog.h>

#include <string>

#include "common/status.h"

namespace een {

// Sets the default logger's pattern; EEN_LOG_LEVEL sets the level (see
// LogLevelFromEnvironment). With an unknown EEN_LOG_LEVEL the logger is set
// up at info all the same and the error says which values are valid.
Status InitLogging(const std::string& who);

// EEN_LOG_LEVEL: trace, debug, info (also when unset or empty), warn,
// error, critical or off; anything else is InvalidArgument naming them.
Result<spdlog::level::level_enum> LogLevelFromEnvironment();

// A warning that a flood of bad messages must not turn into a flood of
// lines: the first 3 of each `kind` are logged whole, then only the 10th,
// 100th, 1000th, ... with the count so far.
void WarnCounted(const std::string& kind, const std::string& text);

// A status deliberately not acted on (a best-effort send to a peer that may
// be gone, a cleanup on the way out): logged at debug level as "WHAT: ...",
// never dropped without a word.
void Ignored(const Status& s, const char* what);
// The kind of a refusal message: its text up to the first digit (so
// "chunk 7 ..." and "chunk 9 ..." count together), at most 60 characters.
std::string KindOf(const std::string& text);

}  // namespace een
