#include "common/error_codes.h"

#include <array>
#include <utility>

namespace een {

namespace {

constexpr std::array<std::pair<StatusCode, wire::ErrorCode>, 12> kTable = {{
    {StatusCode::kInvalidArgument, wire::ErrorCode::INVALID_ARGUMENT},
    {StatusCode::kNotFound, wire::ErrorCode::NOT_FOUND},
    {StatusCode::kDeadlineExceeded, wire::ErrorCode::DEADLINE_EXCEEDED},
    {StatusCode::kUnavailable, wire::ErrorCode::UNAVAILABLE},
    {StatusCode::kFailedPrecondition, wire::ErrorCode::FAILED_PRECONDITION},
    {StatusCode::kAborted, wire::ErrorCode::ABORTED},
    {StatusCode::kResourceExhausted, wire::ErrorCode::RESOURCE_EXHAUSTED},
    {StatusCode::kPermissionDenied, wire::ErrorCode::PERMISSION_DENIED},
    {StatusCode::kDataLoss, wire::ErrorCode::DATA_LOSS},
    {StatusCode::kInternal, wire::ErrorCode::INTERNAL},
    {StatusCode::kStaleEpoch, wire::ErrorCode::STALE_EPOCH},
    {StatusCode::kJobFinished, wire::ErrorCode::JOB_FINISHED},
}};

}  // namespace

wire::ErrorCode WireCodeOf(StatusCode code) {
  for (const auto& [status, wire_code] : kTable) {
    if (status == code) return wire_code;
  }
  return wire::ErrorCode::INTERNAL;
}

StatusCode StatusCodeOf(wire::ErrorCode code) {
  for (const auto& [status, wire_code] : kTable) {
    if (wire_code == code) return status;
  }
  return StatusCode::kInternal;
}

Status StatusOf(wire::Error::Reader error, const std::string& prefix) {
  return Status(StatusCodeOf(error.getCode()), prefix + error.getMessage().cStr());
}

}  // namespace een
