// RAII for ucp_ep_h: a connection from our worker to a peer worker, made from its packed address.
#ifndef OSCARKV_LIB_TRANSFER_UCX_UCX_ENDPOINT_H_
#define OSCARKV_LIB_TRANSFER_UCX_UCX_ENDPOINT_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/transfer/ucx/ucx_worker.h"

namespace oscarkv::transfer::ucx {

// Same thread rules as UcxWorker. The worker must outlive the endpoint.
// With `peer_errors`, endpoints use UCP_ERR_HANDLING_MODE_PEER: a dead or unreachable peer fails
// the requests on the endpoint (instead of hanging them) and marks the endpoint failed(); the
// owner then drops it and reconnects on the next use. UCX 1.13 cannot use its shared-memory
// transports in that mode, so same-host transfers fall back to TCP (bench/transfer/RESULTS.md).
// Without it (UCP_ERR_HANDLING_MODE_NONE) sm works but a dead peer may hang transfers.
class UcxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<UcxEndpoint>> Create(UcxWorker* worker,
                                                             const std::string& peer_address,
                                                             bool peer_errors);
  // Closes, progressing the worker for up to ~1 s: forcefully in peer-error mode (defined there),
  // by flushing otherwise.
  ~UcxEndpoint();

  // Whether UCX reported an error on this endpoint (set from the worker's progress).
  bool failed() const { return failed_; }
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  ucp_ep_h get() const { return ep_; }

 private:
  UcxEndpoint(UcxWorker* worker, bool peer_errors) : worker_(worker), peer_errors_(peer_errors) {}
  static void OnError(void* arg, ucp_ep_h ep, ucs_status_t status);
  UcxWorker* worker_;
  const bool peer_errors_;
  ucp_ep_h ep_ = nullptr;
  bool failed_ = false;  // written by OnError, which runs inside the owner-serialised progress
};

}  // namespace oscarkv::transfer::ucx

#endif  // OSCARKV_LIB_TRANSFER_UCX_UCX_ENDPOINT_H_
