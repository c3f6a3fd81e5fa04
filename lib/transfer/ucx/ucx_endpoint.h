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
class UcxEndpoint {
 public:
  static absl::StatusOr<std::unique_ptr<UcxEndpoint>> Create(UcxWorker* worker,
                                                             const std::string& peer_address);
  // Closes (forcefully, progressing the worker for up to ~1 s) so a dead peer cannot hang us.
  ~UcxEndpoint();
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  ucp_ep_h get() const { return ep_; }

 private:
  UcxEndpoint(UcxWorker* worker, ucp_ep_h ep) : worker_(worker), ep_(ep) {}
  UcxWorker* worker_;
  ucp_ep_h ep_;
};

}  // namespace oscarkv::transfer::ucx

#endif  // OSCARKV_LIB_TRANSFER_UCX_UCX_ENDPOINT_H_
