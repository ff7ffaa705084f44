// Early-return macros for absl::Status and absl::StatusOr, private to store/.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ROTE_STORE_CONCAT_INNER(a, b) a##b
#define ROTE_STORE_CONCAT(a, b) ROTE_STORE_CONCAT_INNER(a, b)
#define RETURN_IF_ERROR_IMPL(st, expr)          \
  do {                                          \
    if (absl::Status st = (expr); !st.ok()) return st; \
  } while (0)
// __COUNTER__: writes nest (a lambda inside RETURN_IF_ERROR uses it again), so names must differ.
#define RETURN_IF_ERROR(expr) RETURN_IF_ERROR_IMPL(ROTE_STORE_CONCAT(status_, __COUNTER__), expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(*tmp)
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(ROTE_STORE_CONCAT(statusor_, __COUNTER__), lhs, expr)
