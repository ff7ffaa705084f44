// Errors of the inference module. `inference` must build where abseil is absent (the GPU
// machine), so it carries this small Status/StatusOr instead of absl's. The codes are the
// canonical ones (same numbering as absl/gRPC), so the orchestrator converts at the boundary
// with a cast: absl::Status(static_cast<absl::StatusCode>(s.code()), s.message()).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace rote::inference {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// Holds a T or a non-OK Status. Accessing value() of an error is a programming bug and aborts.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit like absl::StatusOr
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Internal("StatusOr constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { Check(); return *value_; }
  const T& value() const& { Check(); return *value_; }
  T&& value() && { Check(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const;
  std::optional<T> value_;
  Status status_;
};

[[noreturn]] void DieOnBadStatusOrAccess(const Status& status);

template <typename T>
void StatusOr<T>::Check() const {
  if (!value_.has_value()) DieOnBadStatusOrAccess(status_);
}

}  // namespace rote::inference

// Early return of a non-OK Status from a function returning Status or StatusOr.
#define ROTE_RETURN_IF_ERROR(expr)                          \
  do {                                                      \
    ::rote::inference::Status rote_status_ = (expr);        \
    if (!rote_status_.ok()) return rote_status_;            \
  } while (0)

#define ROTE_CONCAT_INNER_(a, b) a##b
#define ROTE_CONCAT_(a, b) ROTE_CONCAT_INNER_(a, b)
// ROTE_ASSIGN_OR_RETURN(auto x, Foo()); returns Foo()'s status on error.
#define ROTE_ASSIGN_OR_RETURN(lhs, expr) \
  ROTE_ASSIGN_OR_RETURN_IMPL_(ROTE_CONCAT_(rote_statusor_, __COUNTER__), lhs, expr)
#define ROTE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
