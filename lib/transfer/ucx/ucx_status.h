// ucs_status_t stays inside the UCX backend (STYLE habit 8): this is where it becomes absl::Status.
#ifndef OSCARKV_LIB_TRANSFER_UCX_UCX_STATUS_H_
#define OSCARKV_LIB_TRANSFER_UCX_UCX_STATUS_H_

#include <ucs/type/status.h>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace oscarkv::transfer::ucx {

// `what` names the failed call. Unreachable peers and timeouts map to kUnavailable (retry),
// out-of-resource to kResourceExhausted, anything else to kInternal.
inline absl::Status UcsToStatus(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
      return absl::UnavailableError(message);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace oscarkv::transfer::ucx

#endif  // OSCARKV_LIB_TRANSFER_UCX_UCX_STATUS_H_
