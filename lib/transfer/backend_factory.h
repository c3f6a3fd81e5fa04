// One place that turns a worker's --transfer_backend choice into a TransferBackend (the prefill,
// decode and kvstore workers each had a copy of this).
#ifndef OSCARKV_LIB_TRANSFER_BACKEND_FACTORY_H_
#define OSCARKV_LIB_TRANSFER_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/transfer/transfer_backend.h"

namespace oscarkv::transfer {

struct BackendChoice {
  std::string name = "ucx";                    // "local" | "ucx"; Default: "ucx"
  std::string ucx_transports = "tcp,self,sm";  // UCX_TLS; Default: "tcp,self,sm"
  bool ucx_peer_failure_detection = true;      // see UcxOptions; Default: true
};

// @return the backend's creation errors; kFailedPrecondition for "ucx" in a build without UCX;
//   kInvalidArgument for an unknown name.
absl::StatusOr<std::unique_ptr<TransferBackend>> CreateBackend(const BackendChoice& choice);

}  // namespace oscarkv::transfer

#endif  // OSCARKV_LIB_TRANSFER_BACKEND_FACTORY_H_
