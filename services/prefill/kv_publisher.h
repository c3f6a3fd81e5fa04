// Publishes a prefill's blocks: stages ALL of them in a registered outbox buffer (where the
// decode worker gets them through lib/transfer, pull model), and writes the reusable ones to
// the kvstore (Reserve → put → Commit; Abort on a failed put).
//
// Outbox entries live until `outbox_ttl` passes (Sweep) or the outbox needs room for a new
// entry (oldest first). Thread-safe: one mutex guards the outbox map; transfers run unlocked.
#ifndef OSCARKV_SERVICES_PREFILL_KV_PUBLISHER_H_
#define OSCARKV_SERVICES_PREFILL_KV_PUBLISHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/engine/serving_engine.h"
#include "lib/transfer/transfer_backend.h"
#include "services/prefill/kvstore_client.h"

namespace oscarkv::prefill {

// A request's blocks in the outbox, in prompt order; each BlockInfo's location points there.
struct StagedBlocks {
  uint64_t outbox_id = 0;
  std::vector<BlockInfo> blocks;
  std::vector<bool> reusable;
  transfer::MemoryHandle handle = 0;
  uint64_t bytes = 0;  // serialised bytes of all blocks
};

struct StorePublishStats {
  int written_blocks = 0;      // put and committed by this call
  int already_stored = 0;      // skipped: the store had them (or another writer is writing)
  uint64_t written_bytes = 0;  // bytes put
};

class KvPublisher {
 public:
  // `backend` not owned, must outlive this. `store` may be null (no kvstore configured).
  KvPublisher(transfer::TransferBackend* backend, KvStoreClient* store, std::string worker_id,
              absl::Duration outbox_ttl, uint64_t outbox_capacity_bytes);
  ~KvPublisher();

  // Copies `blocks` into one new registered buffer. @return kResourceExhausted when they do not
  // fit even after dropping every older entry; transfer registration errors.
  absl::StatusOr<StagedBlocks> Stage(std::span<const engine::SequenceBlock> blocks);
  // Writes the staged reusable blocks to the kvstore. @return kFailedPrecondition without a
  // store; kvstore / transfer errors (reservations are aborted on a failed put).
  absl::StatusOr<StorePublishStats> PublishToStore(const StagedBlocks& staged);
  // Drops expired outbox entries; returns how many.
  int Sweep();
  uint64_t outbox_bytes() const;

 private:
  struct Entry {
    std::vector<std::byte> buffer;
    transfer::MemoryHandle handle = 0;
    absl::Time expires;
  };
  void DropLocked(std::map<uint64_t, Entry>::iterator it);

  transfer::TransferBackend* backend_;
  KvStoreClient* store_;
  const std::string worker_id_;
  const absl::Duration ttl_;
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> outbox_;  // by id (= age order); guarded by mu_
  uint64_t next_id_ = 1;              // guarded by mu_
  uint64_t bytes_ = 0;                // guarded by mu_
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_KV_PUBLISHER_H_
