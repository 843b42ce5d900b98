// Status and Result: expected failures as values.
//
// Contract: every fallible EEN operation returns a [[nodiscard]] Status or
// Result<T>. Codes follow abseil's canonical set. Messages say what happened,
// where, and what to do. Status and Result are plain values: safe to copy and
// move between threads, not safe to mutate from two threads at once.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace een {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kDeadlineExceeded,
  kUnavailable,
  kFailedPrecondition,
  kAborted,
  kResourceExhausted,
  kPermissionDenied,
  kDataLoss,
  kInternal,
  // EEN's own: a message routed with an older shard map than the receiver's
  // (fetch the new map, send again), and a request that came after the job
  // (or this worker's part in it) finished: nothing is wrong, nothing is left.
  kStaleEpoch,
  kJobFinished,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status StaleEpoch(std::string m) { return {StatusCode::kStaleEpoch, std::move(m)}; }
inline Status JobFinished(std::string m) { return {StatusCode::kJobFinished, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace een

// Returns early from the enclosing function with a non-OK status.
#define EEN_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::een::Status een_status_ = (expr);        \
    if (!een_status_.ok()) return een_status_; \
  } while (0)

#define EEN_CONCAT_INNER(a, b) a##b
#define EEN_CONCAT(a, b) EEN_CONCAT_INNER(a, b)
#define EEN_ASSIGN_OR_RETURN(lhs, expr) \
  EEN_ASSIGN_OR_RETURN_IMPL(EEN_CONCAT(een_result_, __LINE__), lhs, expr)
#define EEN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
