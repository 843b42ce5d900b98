#include "worker/public_error.h"

namespace een {

Error::Code PublicCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
    case StatusCode::kInternal:
      return Error::Code::kInternal;
    case StatusCode::kInvalidArgument:
      return Error::Code::kInvalidArgument;
    case StatusCode::kNotFound:
      return Error::Code::kNotFound;
    case StatusCode::kDeadlineExceeded:
      return Error::Code::kDeadlineExceeded;
    case StatusCode::kUnavailable:
      return Error::Code::kUnavailable;
    case StatusCode::kFailedPrecondition:
      return Error::Code::kFailedPrecondition;
    case StatusCode::kAborted:
      return Error::Code::kAborted;
    case StatusCode::kResourceExhausted:
      return Error::Code::kResourceExhausted;
    case StatusCode::kPermissionDenied:
      return Error::Code::kPermissionDenied;
    case StatusCode::kDataLoss:
      return Error::Code::kDataLoss;
    case StatusCode::kStaleEpoch:
      return Error::Code::kStaleEpoch;
    case StatusCode::kJobFinished:
      return Error::Code::kJobFinished;
  }
  return Error::Code::kInternal;
}

}  // namespace een
