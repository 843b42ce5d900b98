// The public error code (een::Error::Code, include/een/error.h) of an
// internal Status code: how the worker library's entry points
// (DataParallel, ProcessGroup) report a failed Status to the program.
// Thread safety: a pure function.
#pragma once

#include "common/status.h"
#include "een/error.h"

namespace een {

Error::Code PublicCode(StatusCode code);

}  // namespace een
