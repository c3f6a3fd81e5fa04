// In-process backend for the all-in-one mode (`oscarkv serve`): every LocalBackend of one process
// shares a registry of regions, and a put/get is a memcpy done inside Post. Peers in other
// processes cannot be reached (capabilities().remote_peers == false).
#ifndef OSCARKV_LIB_TRANSFER_LOCAL_LOCAL_BACKEND_H_
#define OSCARKV_LIB_TRANSFER_LOCAL_LOCAL_BACKEND_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "lib/transfer/transfer_backend.h"

namespace oscarkv::transfer {

// Thread-safe. Remote descriptors name (process id, region id); a descriptor from another process
// or of a deregistered region is rejected with kInvalidArgument.
class LocalBackend final : public TransferBackend {
 public:
  static absl::StatusOr<std::unique_ptr<LocalBackend>> Create();
  ~LocalBackend() override;  // deregisters what is left

  Capabilities capabilities() const override;
  std::string EndpointAddress() const override;
  absl::StatusOr<RegisteredMemory> RegisterMemory(std::span<std::byte> region) override;
  absl::Status DeregisterMemory(MemoryHandle handle) override;
  absl::StatusOr<TransferId> Post(const TransferBatch& batch) override;
  absl::StatusOr<TransferState> Poll(TransferId id) override;
  TransferCounters counters() const override;

 private:
  LocalBackend() = default;

  mutable std::mutex mu_;
  std::unordered_map<MemoryHandle, std::span<std::byte>> local_regions_;  // guarded by mu_
  std::unordered_map<TransferId, absl::Status> finished_;                 // guarded by mu_
  TransferId next_id_ = 1;                                                // guarded by mu_
  std::atomic<uint64_t> bytes_put_{0}, bytes_got_{0}, batches_done_{0}, batches_failed_{0};
};

}  // namespace oscarkv::transfer

#endif  // OSCARKV_LIB_TRANSFER_LOCAL_LOCAL_BACKEND_H_
