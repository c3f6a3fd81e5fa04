// NCCL backend (GPU to GPU): two-sided. A batch's kPut ops are ncclSend to the peer rank and its
// kGet ops are ncclRecv from it, grouped (ncclGroupStart/End) on the backend's CUDA stream; the
// peer must post the matching opposite batch with the same byte counts in the same order.
// remote_descriptor and remote_offset are ignored (capabilities().one_sided == false).
// Built only when the CUDA toolkit ships nccl.h and libnccl (OSCARKV_HAVE_NCCL); exercised on the
// GPU machine only.
#ifndef OSCARKV_LIB_TRANSFER_NCCL_NCCL_BACKEND_H_
#define OSCARKV_LIB_TRANSFER_NCCL_NCCL_BACKEND_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lib/transfer/transfer_backend.h"

namespace oscarkv::transfer {

struct NcclOptions {
  int rank = 0;        // this process's rank. Default: 0
  int world_size = 2;  // ranks in the communicator. Default: 2
  // ncclUniqueId bytes from NcclBackend::NewUniqueId() on one rank, shared through the control
  // plane. Default: empty (invalid).
  std::string unique_id;
  int cuda_device = 0;  // Default: 0
};

class NcclBackend final : public TransferBackend {
 public:
  // A fresh communicator id (ncclGetUniqueId). @return kInternal on NCCL failure.
  static absl::StatusOr<std::string> NewUniqueId();
  // Joins the communicator (blocks until all ranks joined).
  // @return kInvalidArgument (bad id/rank), kInternal / kUnavailable from CUDA or NCCL.
  static absl::StatusOr<std::unique_ptr<NcclBackend>> Create(const NcclOptions& options);
  ~NcclBackend() override;

  Capabilities capabilities() const override;
  std::string EndpointAddress() const override;  // "nccl:<rank>"
  // `region` must be CUDA device memory of options.cuda_device.
  absl::StatusOr<RegisteredMemory> RegisterMemory(std::span<std::byte> region) override;
  absl::Status DeregisterMemory(MemoryHandle handle) override;
  // peer_address is the peer's EndpointAddress(). The data in the registered regions must be
  // complete (synchronise its producer's stream first). Blocks until the peer posts its
  // matching batch when the pair is not connected yet (NCCL connects lazily, inside
  // ncclGroupEnd, with both ranks present): post the receive side without waiting for the
  // sender first. Seen on an H200 pair, where a receive posted before the sender's ready
  // message deadlocked.
  absl::StatusOr<TransferId> Post(const TransferBatch& batch) override;
  absl::StatusOr<TransferState> Poll(TransferId id) override;
  TransferCounters counters() const override;

 private:
  struct State;
  explicit NcclBackend(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  std::atomic<uint64_t> bytes_put_{0}, bytes_got_{0}, batches_done_{0}, batches_failed_{0};
};

// Parses "nccl:<rank>". @return kInvalidArgument otherwise.
absl::StatusOr<int> ParseNcclAddress(const std::string& address);

}  // namespace oscarkv::transfer

#endif  // OSCARKV_LIB_TRANSFER_NCCL_NCCL_BACKEND_H_
