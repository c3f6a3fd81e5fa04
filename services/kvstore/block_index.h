// Which blocks the store knows, in what state (reserved: space handed to a writer; committed:
// bytes verified and visible), where they live in the pool, and their header facts.
// Not thread-safe: BlockStore serialises access.
#ifndef OSCARKV_SERVICES_KVSTORE_BLOCK_INDEX_H_
#define OSCARKV_SERVICES_KVSTORE_BLOCK_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kvstore {

struct BlockKeyHash {
  size_t operator()(const kvformat::BlockKey& key) const {
    return static_cast<size_t>(key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull));
  }
};

// What a writer declares about a block (mirrors BlockDescriptor without the location).
struct BlockMeta {
  kvformat::BlockKey key{};
  kvformat::BlockKey prev_key{};
  kvformat::CodecId codec = kvformat::CodecId::kOscar;
  kvformat::BlockKind kind = kvformat::BlockKind::kQuantized;
  uint32_t first_position = 0;
  uint32_t token_count = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
  // Bytes the same tokens take as a BF16 block (header + PayloadBytes(kBf16)), for "bytes saved";
  // 0 = unknown (the store then counts the block as saving nothing).
  uint64_t bf16_equivalent_bytes = 0;

  // Serialised size: 128-byte header + payload.
  uint64_t serialized_bytes() const { return 128 + payload_bytes; }
};

// A byte range of the pool.
struct Slot {
  uint64_t offset = 0;
  uint64_t length = 0;
};

enum class EntryState { kReserved, kCommitted };

struct IndexEntry {
  BlockMeta meta;
  Slot slot;
  EntryState state = EntryState::kReserved;
  absl::Time reserved_until = absl::InfiniteFuture();  // reservations only
};

class BlockIndex {
 public:
  // Adds a reservation. @return kAlreadyExists if the key is present in any state.
  absl::Status Reserve(const BlockMeta& meta, Slot slot, absl::Time reserved_until);
  // Reserved → committed; records the block's BF16-equivalent size (known once its header has
  // been read) for the per-codec totals.
  // @return kNotFound (absent), kFailedPrecondition (already committed).
  absl::Status Commit(const kvformat::BlockKey& key, uint64_t bf16_equivalent_bytes);
  // Removes the entry in any state and returns it. @return kNotFound.
  absl::StatusOr<IndexEntry> Remove(const kvformat::BlockKey& key);
  // The entry or null. The pointer is valid until the next mutation.
  const IndexEntry* Find(const kvformat::BlockKey& key) const;
  // Number of leading keys of `chain` that are committed.
  size_t LongestCommittedPrefix(std::span<const kvformat::BlockKey> chain) const;
  // Keys of reservations whose time ran out at `now`.
  std::vector<kvformat::BlockKey> ExpiredReservations(absl::Time now) const;

  // Keys of every committed block, in no particular order.
  std::vector<kvformat::BlockKey> CommittedKeys() const;
  size_t committed_blocks() const { return committed_; }
  size_t reserved_blocks() const { return entries_.size() - committed_; }
  // Committed blocks, serialised bytes and BF16-equivalent bytes, per codec id.
  struct CodecTotals {
    uint64_t blocks = 0;
    uint64_t stored_bytes = 0;
    uint64_t bf16_equivalent_bytes = 0;
  };
  const CodecTotals& totals(kvformat::CodecId codec) const {
    return totals_[static_cast<size_t>(codec)];
  }

 private:
  void AddTotals(const BlockMeta& meta, int sign);

  std::unordered_map<kvformat::BlockKey, IndexEntry, BlockKeyHash> entries_;
  size_t committed_ = 0;
  CodecTotals totals_[kvformat::kNumCodecs];
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_BLOCK_INDEX_H_
