#include "store/records.h"

namespace rote::store {

std::string_view ReviewStateName(ReviewState state) {
  switch (state) {
    case ReviewState::kPending: return "pending";
    case ReviewState::kApproved: return "approved";
    case ReviewState::kRejected: return "rejected";
  }
  return "pending";
}

std::optional<ReviewState> ParseReviewState(std::string_view name) {
  if (name == "pending") return ReviewState::kPending;
  if (name == "approved") return ReviewState::kApproved;
  if (name == "rejected") return ReviewState::kRejected;
  return std::nullopt;
}

std::string_view RunStateName(RunState state) {
  switch (state) {
    case RunState::kPending: return "pending";
    case RunState::kRunning: return "running";
    case RunState::kSucceeded: return "succeeded";
    case RunState::kFailed: return "failed";
    case RunState::kCancelled: return "cancelled";
  }
  return "pending";
}

std::optional<RunState> ParseRunState(std::string_view name) {
  if (name == "pending") return RunState::kPending;
  if (name == "running") return RunState::kRunning;
  if (name == "succeeded") return RunState::kSucceeded;
  if (name == "failed") return RunState::kFailed;
  if (name == "cancelled") return RunState::kCancelled;
  return std::nullopt;
}

bool IsTerminal(RunState state) {
  return state == RunState::kSucceeded || state == RunState::kFailed ||
         state == RunState::kCancelled;
}

bool IsLegalTransition(RunState from, RunState to) {
  switch (from) {
    case RunState::kPending:
      // A run can fail or be cancelled before it starts, but succeeds only after running.
      return to == RunState::kRunning || to == RunState::kFailed || to == RunState::kCancelled;
    case RunState::kRunning:
      return to == RunState::kSucceeded || to == RunState::kFailed || to == RunState::kCancelled;
    default:
      return false;
  }
}

}  // namespace rote::store
