// UCX backend: one ucp context and worker per backend, one-sided RMA (put/get) into regions that
// peers registered and described with packed rkeys. Works between threads, processes and hosts
// over TCP, shared memory (sm: posix/sysv/cma) and loopback (self); with a CUDA-enabled UCX the
// same code moves GPU memory. Addresses and descriptors are plain bytes for the control plane.
//
// Progress: a background thread drives the worker (needed for the target side of software-
// emulated RMA over TCP and for connection set-up), and Poll() progresses too, so a caller that
// polls never waits on the thread's back-off.
#ifndef OSCARKV_LIB_TRANSFER_UCX_UCX_BACKEND_H_
#define OSCARKV_LIB_TRANSFER_UCX_UCX_BACKEND_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lib/transfer/transfer_backend.h"

namespace oscarkv::transfer {

struct UcxOptions {
  // UCX transports (UCX_TLS), set through ucp_config_modify. "tcp,self,sm" needs no special
  // hardware. Default: "tcp,self,sm".
  std::string transports = "tcp,self,sm";
  // Further UCX settings without the UCX_ prefix, e.g. {"NET_DEVICES", "lo"}. Default: none.
  std::vector<std::pair<std::string, std::string>> extra_config;
  // Endpoints detect dead peers (UCP_ERR_HANDLING_MODE_PEER): transfers to a dead peer fail
  // instead of hanging and the backend reconnects on next use. UCX 1.13 then cannot use the
  // shared-memory transports, so same-host transfers run over TCP (about 10x slower here; see
  // bench/transfer/RESULTS.md). Turn off for co-located processes that trust each other (the
  // same-host benchmark). Default: true.
  bool peer_failure_detection = true;
  // Run a progress thread. Without it the worker only progresses inside Post/Poll, so a backend
  // that is only a target must be polled by someone. Default: true.
  bool progress_thread = true;
};

namespace ucx {
class UcxContext;
class UcxWorker;
class UcxEndpoint;
class UcxMemory;
class UcxRkey;
}  // namespace ucx

// Thread-safe: one mutex serialises every worker call (lock order: mu_ only).
class UcxBackend final : public TransferBackend {
 public:
  // @return kInvalidArgument for a bad setting, kInternal when UCX cannot start.
  static absl::StatusOr<std::unique_ptr<UcxBackend>> Create(const UcxOptions& options = {});
  ~UcxBackend() override;

  Capabilities capabilities() const override;
  std::string EndpointAddress() const override;  // the packed ucp worker address
  absl::StatusOr<RegisteredMemory> RegisterMemory(std::span<std::byte> region) override;
  absl::Status DeregisterMemory(MemoryHandle handle) override;
  absl::StatusOr<TransferId> Post(const TransferBatch& batch) override;
  absl::StatusOr<TransferState> Poll(TransferId id) override;
  TransferCounters counters() const override;
  void ExpectPeerTraffic() override;

 private:
  struct Peer;
  struct Pending;
  explicit UcxBackend(const UcxOptions& options);
  absl::StatusOr<Peer*> GetPeerLocked(const std::string& address);
  absl::StatusOr<ucx::UcxRkey*> GetRkeyLocked(Peer& peer, const std::string& packed);
  void ProgressLoop();

  UcxOptions options_;
  std::unique_ptr<ucx::UcxContext> context_;
  std::unique_ptr<ucx::UcxWorker> worker_;
  std::string address_;

  mutable std::mutex mu_;
  std::unordered_map<MemoryHandle, std::unique_ptr<ucx::UcxMemory>> memories_;  // guarded by mu_
  std::unordered_map<std::string, std::unique_ptr<Peer>> peers_;                // guarded by mu_
  std::unordered_map<TransferId, std::unique_ptr<Pending>> pending_;            // guarded by mu_
  uint64_t next_handle_ = 1;                                                    // guarded by mu_
  TransferId next_id_ = 1;                                                      // guarded by mu_

  std::atomic<bool> stop_{false};
  // ExpectPeerTraffic's deadline (steady clock, ns): the progress thread stays quick until then.
  std::atomic<int64_t> quick_until_ns_{0};
  std::thread progress_thread_;
  std::atomic<uint64_t> bytes_put_{0}, bytes_got_{0}, batches_done_{0}, batches_failed_{0};
};

}  // namespace oscarkv::transfer

#endif  // OSCARKV_LIB_TRANSFER_UCX_UCX_BACKEND_H_
