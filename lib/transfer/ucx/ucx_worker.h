// RAII for ucp_worker_h: the progress engine and this process's address for peers.
#ifndef OSCARKV_LIB_TRANSFER_UCX_UCX_WORKER_H_
#define OSCARKV_LIB_TRANSFER_UCX_UCX_WORKER_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace oscarkv::transfer::ucx {

// Not thread-safe by itself (UCS_THREAD_MODE_SERIALIZED): the owner serialises all calls.
class UcxWorker {
 public:
  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(ucp_context_h context);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h get() const { return worker_; }
  // The packed worker address (bytes for the control plane).
  const std::string& address() const { return address_; }
  // One round of progress; returns the number of events processed.
  unsigned Progress() { return ucp_worker_progress(worker_); }

 private:
  UcxWorker(ucp_worker_h worker, std::string address)
      : worker_(worker), address_(std::move(address)) {}
  ucp_worker_h worker_;
  std::string address_;
};

}  // namespace oscarkv::transfer::ucx

#endif  // OSCARKV_LIB_TRANSFER_UCX_UCX_WORKER_H_
