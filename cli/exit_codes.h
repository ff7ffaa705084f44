// Exit codes of the `rote` command, stable for scripts.
#pragma once

namespace rote::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // the operation ran and failed (run failed, mismatch)
inline constexpr int kExitUsage = 2;        // bad command line
inline constexpr int kExitUnavailable = 3;  // server unreachable
inline constexpr int kExitAuth = 4;         // UNAUTHENTICATED or PERMISSION_DENIED
inline constexpr int kExitNotFound = 5;     // NOT_FOUND
inline constexpr int kExitInvalid = 6;      // INVALID_ARGUMENT, FAILED_PRECONDITION, ABORTED
inline constexpr int kExitDataLoss = 7;     // DATA_LOSS
inline constexpr int kExitInternal = 8;     // anything else
inline constexpr int kExitResourceExhausted = 9;  // RESOURCE_EXHAUSTED: a quota, limit or full disk

}  // namespace rote::cli
