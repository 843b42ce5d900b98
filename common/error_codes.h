// Error codes on the wire: one table between een::StatusCode and the
// schema's wire::ErrorCode, so an error keeps its meaning from the role
// that found it to the one that reads it (a stale epoch stays a stale
// epoch, a full disk stays ResourceExhausted, a finished job JobFinished).
// Every StatusCode but kOk has exactly one wire code and back
// (tests/error_codes_test.cc checks both directions for all of them).
#pragma once

#include <string>

#include "common/status.h"
#include "schema/een.capnp.h"

namespace een {

wire::ErrorCode WireCodeOf(StatusCode code);    // kOk: internal (an error must say what failed)
StatusCode StatusCodeOf(wire::ErrorCode code);  // an unknown wire code: kInternal
// The Status an Error message stands for, its text after `prefix`.
Status StatusOf(wire::Error::Reader error, const std::string& prefix = "");

}  // namespace een
