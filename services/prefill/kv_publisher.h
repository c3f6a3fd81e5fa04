// Publishes a prefill's blocks: stages ALL of them in a registered outbox buffer (where the
// decode worker gets them through lib/transfer, pull model), and writes the reusable ones to
// the kvstore (Reserve → put → Commit; Abort on a failed put).
//
// Outbox entries live until `outbox_ttl` passes (Sweep) or the outbox needs room for a new
// entry (oldest first). A dropped entry's memory is deregistered at once but freed only
// kRetiredFor later (Sweep), or when retired bytes pass the outbox capacity: a software
// transport (UCX over TCP or shared memory) serves a peer's get from the address it was given,
// so a late pull of a dropped entry must still find mapped memory, not crash the worker (it
// reads the old, intact bytes, which the decode worker checks). Thread-safe: one mutex guards
// the outbox map; transfers run unlocked.
#ifndef OSCARKV_SERVICES_PREFILL_KV_PUBLISHER_H_
#define OSCARKV_SERVICES_PREFILL_KV_PUBLISHER_H_

#include <cstdint>
#include <deque>
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
  // Drops expired outbox entries (returns how many) and frees retired memory past its time.
  int Sweep();
  uint64_t outbox_bytes() const;
  // Deregisters every entry, keeping the memory until this object is destroyed: called before
  // the transfer backend goes, which may still be serving a pull from it.
  void Close();

  static constexpr absl::Duration kRetiredFor = absl::Seconds(30);

 private:
  struct Entry {
    std::vector<std::byte> buffer;
    transfer::MemoryHandle handle = 0;
    absl::Time expires;
  };
  // Deregisters the entry and retires its memory.
  void DropLocked(std::map<uint64_t, Entry>::iterator it);
  struct Retired {
    std::vector<std::byte> buffer;
    absl::Time free_at;
  };

  transfer::TransferBackend* backend_;
  KvStoreClient* store_;
  const std::string worker_id_;
  const absl::Duration ttl_;
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> outbox_;  // by id (= age order); guarded by mu_
  uint64_t next_id_ = 1;              // guarded by mu_
  uint64_t bytes_ = 0;                // guarded by mu_
  std::deque<Retired> retired_;       // oldest first; guarded by mu_
  uint64_t retired_bytes_ = 0;        // guarded by mu_
  bool closed_ = false;               // guarded by mu_
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_KV_PUBLISHER_H_
