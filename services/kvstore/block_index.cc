#include "services/kvstore/block_index.h"

#include "absl/strings/str_cat.h"
#include "lib/kvformat/block_key.h"

namespace oscarkv::kvstore {

absl::Status BlockIndex::Reserve(const BlockMeta& meta, Slot slot, absl::Time reserved_until) {
  auto [it, inserted] = entries_.try_emplace(meta.key);
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("block ", kvformat::BlockKeyToHex(meta.key), " already present"));
  }
  it->second = IndexEntry{meta, slot, EntryState::kReserved, reserved_until};
  return absl::OkStatus();
}

absl::Status BlockIndex::Commit(const kvformat::BlockKey& key, uint64_t bf16_equivalent_bytes) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("block ", kvformat::BlockKeyToHex(key), " is not reserved"));
  }
  if (it->second.state == EntryState::kCommitted) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", kvformat::BlockKeyToHex(key), " is already committed"));
  }
  it->second.state = EntryState::kCommitted;
  it->second.meta.bf16_equivalent_bytes = bf16_equivalent_bytes;
  it->second.reserved_until = absl::InfiniteFuture();
  ++committed_;
  AddTotals(it->second.meta, +1);
  return absl::OkStatus();
}

absl::StatusOr<IndexEntry> BlockIndex::Remove(const kvformat::BlockKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("block ", kvformat::BlockKeyToHex(key), " absent"));
  }
  IndexEntry entry = it->second;
  entries_.erase(it);
  if (entry.state == EntryState::kCommitted) {
    --committed_;
    AddTotals(entry.meta, -1);
  }
  return entry;
}

const IndexEntry* BlockIndex::Find(const kvformat::BlockKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

size_t BlockIndex::LongestCommittedPrefix(std::span<const kvformat::BlockKey> chain) const {
  size_t n = 0;
  for (const kvformat::BlockKey& key : chain) {
    const IndexEntry* entry = Find(key);
    if (entry == nullptr || entry->state != EntryState::kCommitted) break;
    ++n;
  }
  return n;
}

std::vector<kvformat::BlockKey> BlockIndex::ExpiredReservations(absl::Time now) const {
  std::vector<kvformat::BlockKey> out;
  for (const auto& [key, entry] : entries_) {
    if (entry.state == EntryState::kReserved && entry.reserved_until <= now) out.push_back(key);
  }
  return out;
}

void BlockIndex::AddTotals(const BlockMeta& meta, int sign) {
  CodecTotals& t = totals_[static_cast<size_t>(meta.codec)];
  t.blocks += sign;
  t.stored_bytes += sign * static_cast<int64_t>(meta.serialized_bytes());
  t.bf16_equivalent_bytes += sign * static_cast<int64_t>(meta.bf16_equivalent_bytes);
}

std::vector<kvformat::BlockKey> BlockIndex::CommittedKeys() const {
  std::vector<kvformat::BlockKey> keys;
  keys.reserve(committed_);
  for (const auto& [key, entry] : entries_) {
    if (entry.state == EntryState::kCommitted) keys.push_back(key);
  }
  return keys;
}

}  // namespace oscarkv::kvstore
