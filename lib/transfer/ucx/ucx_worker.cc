#include "lib/transfer/ucx/ucx_worker.h"

#include "lib/transfer/ucx/ucx_status.h"

namespace oscarkv::transfer::ucx {

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::Create(ucp_context_h context) {
  ucp_worker_params_t params = {};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  absl::Status status =
      UcsToStatus(ucp_worker_create(context, &params, &worker), "ucp_worker_create");
  if (!status.ok()) return status;
  ucp_address_t* address = nullptr;
  size_t length = 0;
  status = UcsToStatus(ucp_worker_get_address(worker, &address, &length),
                       "ucp_worker_get_address");
  if (!status.ok()) {
    ucp_worker_destroy(worker);
    return status;
  }
  std::string packed(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  return std::unique_ptr<UcxWorker>(new UcxWorker(worker, std::move(packed)));
}

UcxWorker::~UcxWorker() { ucp_worker_destroy(worker_); }

}  // namespace oscarkv::transfer::ucx
