// Status propagation macros. Debian 12's Abseil (20220623) predates ABSL_RETURN_IF_ERROR, so we
// define our own with an OSCARKV_ prefix that cannot clash after an upgrade (docs/DECISIONS.md).
#ifndef OSCARKV_LIB_BASE_STATUS_MACROS_H_
#define OSCARKV_LIB_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define OSCARKV_STATUS_CONCAT_INNER_(a, b) a##b
#define OSCARKV_STATUS_CONCAT_(a, b) OSCARKV_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define OSCARKV_RETURN_IF_ERROR(expr)                         \
  do {                                                        \
    ::absl::Status oscarkv_status_ = (expr);                  \
    if (!oscarkv_status_.ok()) return oscarkv_status_;        \
  } while (false)

// `OSCARKV_ASSIGN_OR_RETURN(auto x, Foo());` evaluates Foo() (an absl::StatusOr<T>), returns its
// status on error, otherwise moves the value into `x`.
#define OSCARKV_ASSIGN_OR_RETURN(lhs, expr)                                                   \
  OSCARKV_ASSIGN_OR_RETURN_IMPL_(OSCARKV_STATUS_CONCAT_(oscarkv_statusor_, __LINE__), lhs, \
                                 expr)
#define OSCARKV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

namespace oscarkv {

// Returns `status` with `context` prepended to its message ("context: message"), same code.
inline absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), std::string(context) + ": " + std::string(status.message()));
}

}  // namespace oscarkv

#endif  // OSCARKV_LIB_BASE_STATUS_MACROS_H_
