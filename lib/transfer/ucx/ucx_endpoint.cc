#include "lib/transfer/ucx/ucx_endpoint.h"

#include <chrono>

#include "lib/base/log.h"
#include "lib/transfer/ucx/ucx_status.h"

namespace oscarkv::transfer::ucx {

absl::StatusOr<std::unique_ptr<UcxEndpoint>> UcxEndpoint::Create(
    UcxWorker* worker, const std::string& peer_address, bool peer_errors) {
  if (peer_address.empty()) return absl::InvalidArgumentError("empty UCX peer address");
  std::unique_ptr<UcxEndpoint> endpoint(new UcxEndpoint(worker, peer_errors));
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  params.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (peer_errors) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_handler.cb = &UcxEndpoint::OnError;
    params.err_handler.arg = endpoint.get();
  }
  absl::Status status =
      UcsToStatus(ucp_ep_create(worker->get(), &params, &endpoint->ep_), "ucp_ep_create");
  if (!status.ok()) {
    endpoint->ep_ = nullptr;
    return status;
  }
  return endpoint;
}

void UcxEndpoint::OnError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* endpoint = static_cast<UcxEndpoint*>(arg);
  endpoint->failed_ = true;
  LOG(WARNING) << "UCX endpoint failed: " << ucs_status_string(status);
}

UcxEndpoint::~UcxEndpoint() {
  if (ep_ == nullptr) return;
  ucp_request_param_t params = {};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = peer_errors_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
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
