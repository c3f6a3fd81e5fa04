// Host memory pool of the store: one anonymous mapping of `capacity` bytes, registered once with
// the transfer backend (so writers put and readers get straight into it), carved into
// variable-size slots by a first-fit allocator with coalescing. Slots are aligned to 256 bytes.
// Tiers: host memory only; the GPU and disk tiers of ARCHITECTURE.md §2 are not built yet.
// Not thread-safe: BlockStore serialises access.
#ifndef OSCARKV_SERVICES_KVSTORE_BLOCK_POOL_H_
#define OSCARKV_SERVICES_KVSTORE_BLOCK_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "lib/transfer/transfer_backend.h"
#include "services/kvstore/block_index.h"

namespace oscarkv::kvstore {

inline constexpr uint64_t kSlotAlignment = 256;

class BlockPool {
 public:
  // Maps `capacity_bytes` (> 0, rounded up to the alignment) and registers it with `backend`
  // (not owned, must outlive the pool; may be null for a pool nobody reaches remotely).
  // @return kInvalidArgument (zero capacity, or one that overflows when aligned),
  //         kResourceExhausted (mmap failed), or the backend's registration error.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(uint64_t capacity_bytes,
                                                           transfer::TransferBackend* backend);
  ~BlockPool();  // deregisters and unmaps
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A slot of at least `bytes` (> 0). @return kResourceExhausted when no free range fits.
  absl::StatusOr<Slot> Allocate(uint64_t bytes);
  // Returns a slot from Allocate. CHECK-fails on a slot that is not allocated.
  void Free(const Slot& slot);

  // The slot's bytes (valid while the slot is allocated).
  std::span<std::byte> Bytes(const Slot& slot);

  uint64_t capacity_bytes() const { return capacity_; }
  uint64_t used_bytes() const { return used_; }
  // Largest single slot that could be allocated now.
  uint64_t largest_free_bytes() const;
  // The registration (empty descriptor when no backend).
  const transfer::RegisteredMemory& registration() const { return registration_; }
  // Tells the backend that a peer is about to read or write the pool (a lookup or reservation
  // was answered; TransferBackend::ExpectPeerTraffic).
  void ExpectPeerTraffic() const {
    if (backend_ != nullptr) backend_->ExpectPeerTraffic();
  }

 private:
  BlockPool(std::byte* base, uint64_t capacity, transfer::TransferBackend* backend);

  std::byte* base_;
  uint64_t capacity_;
  transfer::TransferBackend* backend_;
  transfer::RegisteredMemory registration_;
  std::map<uint64_t, uint64_t> free_;       // offset → length, disjoint, coalesced
  std::map<uint64_t, uint64_t> allocated_;  // offset → length
  uint64_t used_ = 0;
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_BLOCK_POOL_H_
