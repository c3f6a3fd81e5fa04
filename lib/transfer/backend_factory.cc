#include "lib/transfer/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/transfer/local/local_backend.h"
#ifdef OSCARKV_HAVE_UCX
#include "lib/transfer/ucx/ucx_backend.h"
#endif

namespace oscarkv::transfer {

absl::StatusOr<std::unique_ptr<TransferBackend>> CreateBackend(const BackendChoice& choice) {
  if (choice.name == "local") {
    OSCARKV_ASSIGN_OR_RETURN(auto backend, LocalBackend::Create());
    return std::unique_ptr<TransferBackend>(std::move(backend));
  }
  if (choice.name != "ucx") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown transfer backend '", choice.name, "' (local | ucx)"));
  }
#ifdef OSCARKV_HAVE_UCX
  OSCARKV_ASSIGN_OR_RETURN(
      auto backend, UcxBackend::Create({.transports = choice.ucx_transports,
                                        .peer_failure_detection =
                                            choice.ucx_peer_failure_detection}));
  return std::unique_ptr<TransferBackend>(std::move(backend));
#else
  return absl::FailedPreconditionError("this build has no UCX backend; use --transfer_backend local");
#endif
}

}  // namespace oscarkv::transfer
