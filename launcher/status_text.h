// How `eenctl status` shows a JobStatus (schema/een.capnp): a screen of
// text for people (the job, what its step waits for, every process, every
// PS's shards, traffic between hosts) or JSON for scripts (every field,
// names as in the schema).
#pragma once

#include <string>

#include "schema/een.capnp.h"

namespace een {

// A step is shown as waiting once it has waited this long for gradients
// (shorter waits are the normal spread of one step; JSON has them all).
inline constexpr uint64_t kShownWaitMs = 100;

std::string StatusText(wire::JobStatus::Reader status);
// `indent` as nlohmann::json::dump: 2 for people, -1 for one line.
std::string StatusJson(wire::JobStatus::Reader status, int indent = 2);

// "812 ms", "3.2 s", "1h 02m"
std::string Duration(uint64_t ms);
// "1.5 MB", "12 KB", "0 B" (decimal units)
std::string Bytes(double bytes);

}  // namespace een
