// The project's two status macros. Nothing else in the codebase is a macro of this kind.
#ifndef CROUPIER_SRC_COMMON_STATUS_MACROS_H_
#define CROUPIER_SRC_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CROUPIER_CONCAT_INNER_(a, b) a##b
#define CROUPIER_CONCAT_(a, b) CROUPIER_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status croupier_status_ = (expr);        \
    if (!croupier_status_.ok()) return croupier_status_; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, otherwise moves the value
// into `lhs`, which may be a declaration (`auto x`).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(CROUPIER_CONCAT_(croupier_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                           \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

#endif  // CROUPIER_SRC_COMMON_STATUS_MACROS_H_
