#include "lib/transfer/ucx/ucx_endpoint.h"

#include <chrono>

#include "lib/transfer/ucx/ucx_status.h"

namespace oscarkv::transfer::ucx {

absl::StatusOr<std::unique_ptr<UcxEndpoint>> UcxEndpoint::Create(
    UcxWorker* worker, const std::string& peer_address) {
  if (peer_address.empty()) return absl::InvalidArgumentError("empty UCX peer address");
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  ucp_ep_h ep = nullptr;
  absl::Status status = UcsToStatus(ucp_ep_create(worker->get(), &params, &ep), "ucp_ep_create");
  if (!status.ok()) return status;
  return std::unique_ptr<UcxEndpoint>(new UcxEndpoint(worker, ep));
}

UcxEndpoint::~UcxEndpoint() {
  ucp_request_param_t params = {};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t request = ucp_ep_close_nbx(ep_, &params);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (ucp_request_check_status(request) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    worker_->Progress();
  }
  ucp_request_free(request);
}

}  // namespace oscarkv::transfer::ucx
