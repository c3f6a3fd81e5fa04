// The decode worker's sequence table: every sequence it holds (its KV on the worker's
// DecodeDevice) and its state, with a byte capacity. A sequence is admitted by the bytes it will
// occupy at the longest it may grow to (HeldSequence::reserved_kv_bytes), so that the sequences
// admitted never grow past the capacity while they generate. A sequence lives from StartSequence
// until EndTurn releases it, or until its keep (pin) TTL or idle TTL runs out (Sweep).
#ifndef OSCARKV_SERVICES_DECODE_TOKEN_POOL_H_
#define OSCARKV_SERVICES_DECODE_TOKEN_POOL_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/decode/decode_device.h"

namespace oscarkv::decode {

struct PooledSequence {
  uint64_t id = 0;
  std::string request_id;
  std::string session_id;
  std::unique_ptr<HeldSequence> sequence;
  bool generating = false;        // a Generate is running on it
  bool kept = false;              // pinned by EndTurn(keep)
  bool release_when_done = false;  // EndTurn(release) came while generating
  absl::Time expires = absl::InfiniteFuture();  // dropped by Sweep after this
};

struct PoolUsage {
  int64_t sequences = 0;
  int64_t kv_bytes = 0;               // what the sequences' KV occupies now
  int64_t reserved_bytes = 0;         // what it may grow to (admission counts these)
  int64_t bf16_equivalent_bytes = 0;  // the same tokens as a BF16 cache
  int64_t capacity_bytes = 0;
};

// Thread-safe (one mutex). Sequence pointers handed out stay valid while the entry is
// `generating` (Sweep skips such entries, and Release defers to FinishGenerate).
class TokenPool {
 public:
  // `capacity_bytes` > 0; `idle_ttl`: how long a sequence with no Generate/EndTurn is kept;
  // `bf16_bytes_per_token`: a token's KV as BF16 (PoolUsage::bf16_equivalent_bytes).
  TokenPool(int64_t capacity_bytes, absl::Duration idle_ttl, int64_t bf16_bytes_per_token)
      : capacity_bytes_(capacity_bytes),
        idle_ttl_(idle_ttl),
        bf16_bytes_per_token_(bf16_bytes_per_token) {}

  // Takes ownership; returns its id: entry->id when nonzero (one from ReserveId), else a new one.
  // @return kResourceExhausted when its reserved bytes do not fit beside the others';
  //   kAlreadyExists for a used id.
  absl::StatusOr<uint64_t> Insert(std::unique_ptr<PooledSequence> entry, absl::Time now);
  // An id no other sequence will get (for a sequence whose blocks are still arriving).
  uint64_t ReserveId();
  // Marks `id` generating and returns its sequence. @return kNotFound, or kFailedPrecondition
  // when a Generate already runs on it.
  absl::StatusOr<HeldSequence*> BeginGenerate(uint64_t id);
  // Ends a Generate; starts the idle expiry, or drops the sequence when a Release came meanwhile.
  void FinishGenerate(uint64_t id, absl::Time now);
  // Keeps a sequence for `ttl` (EndTurn keep). @return bytes kept, or kNotFound.
  absl::StatusOr<int64_t> Keep(uint64_t id, absl::Duration ttl, absl::Time now);
  // Drops a sequence (EndTurn release); one still generating (a cancelled Generate may hold it
  // for a step more) is dropped when it finishes, and *deferred (optional) says so.
  // @return the bytes released (now or then), or kNotFound.
  absl::StatusOr<int64_t> Release(uint64_t id, bool* deferred = nullptr);
  // Drops expired, non-generating sequences; returns how many.
  int Sweep(absl::Time now);
  // The bytes of now (each sequence asked; they grow while generating).
  PoolUsage Usage() const;

 private:
  const int64_t capacity_bytes_;
  const absl::Duration idle_ttl_;
  const int64_t bf16_bytes_per_token_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<PooledSequence>> entries_;  // guarded by mu_
  uint64_t next_id_ = 1;                                                   // guarded by mu_
  int64_t reserved_bytes_ = 0;  // sum of the entries' reserved_kv_bytes(); guarded by mu_
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_TOKEN_POOL_H_
