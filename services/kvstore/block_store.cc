#include "services/kvstore/block_store.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/kvformat/block.h"
#include "lib/kvformat/block_key.h"
#include "lib/transfer/transfer_backend.h"

namespace oscarkv::kvstore {

BlockStore::BlockStore(const BlockStoreOptions& options, std::unique_ptr<BlockPool> pool,
                       std::unique_ptr<EvictionPolicy> policy, const Clock* clock,
                       KvStoreMetrics* metrics)
    : options_(options), clock_(clock), metrics_(metrics), pool_(std::move(pool)),
      policy_(std::move(policy)) {
  CHECK(pool_ != nullptr && policy_ != nullptr && clock_ != nullptr);
}

void BlockStore::Sweep() {
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(clock_->Now());
}

void BlockStore::SweepLocked(absl::Time now) {
  for (const kvformat::BlockKey& key : index_.ExpiredReservations(now)) {
    absl::StatusOr<IndexEntry> entry = index_.Remove(key);
    if (!entry.ok()) continue;
    pool_->Free(entry->slot);
    ++expired_;
    if (metrics_) metrics_->blocks_expired_total.Increment();
    VLOG(1) << "reservation of " << kvformat::BlockKeyToHex(key) << " expired";
  }
  leases_.ExpireUntil(now);
}

void BlockStore::RemoveLocked(const kvformat::BlockKey& key) {
  absl::StatusOr<IndexEntry> entry = index_.Remove(key);
  if (!entry.ok()) return;
  pool_->Free(entry->slot);
  policy_->OnRemove(key);
  leases_.ForgetKey(key);
}

absl::Status BlockStore::MakeRoomLocked(uint64_t bytes, absl::Time now) {
  const uint64_t need = (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  if (need > pool_->capacity_bytes()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("block of ", bytes, " bytes exceeds the pool (", pool_->capacity_bytes(),
                     " bytes)"));
  }
  while (pool_->largest_free_bytes() < need) {
    std::optional<kvformat::BlockKey> victim = policy_->NextVictim(
        [&](const kvformat::BlockKey& key) { return !leases_.IsProtected(key, now); });
    if (!victim) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no room for ", bytes, " bytes: ", pool_->used_bytes(), " of ",
          pool_->capacity_bytes(), " used and every committed block is pinned or leased"));
    }
    VLOG(2) << "evicting " << kvformat::BlockKeyToHex(*victim);
    RemoveLocked(*victim);
    ++evicted_;
    if (metrics_) metrics_->blocks_evicted_total.Increment();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ReserveResult>> BlockStore::Reserve(std::span<const BlockMeta> blocks,
                                                               absl::Duration ttl) {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = clock_->Now();
  SweepLocked(now);
  const absl::Time until = now + (ttl > absl::ZeroDuration() ? ttl : options_.default_reservation);
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> seen;
  for (const BlockMeta& meta : blocks) {
    if (meta.payload_bytes == 0) return absl::InvalidArgumentError("block with 0 payload bytes");
    if (!seen.insert({meta.key.lo, meta.key.hi}).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", kvformat::BlockKeyToHex(meta.key), " twice in one Reserve"));
    }
  }
  std::vector<ReserveResult> results;
  std::vector<kvformat::BlockKey> made;
  absl::Status failure;
  for (const BlockMeta& meta : blocks) {
    ReserveResult r;
    r.key = meta.key;
    if (const IndexEntry* entry = index_.Find(meta.key); entry != nullptr) {
      if (entry->state == EntryState::kCommitted) {
        r.already_stored = true;
        r.slot = entry->slot;
        policy_->OnAccess(meta.key);
      } else {
        r.in_flight = true;
      }
      results.push_back(r);
      continue;
    }
    failure = MakeRoomLocked(meta.serialized_bytes(), now);
    if (!failure.ok()) break;
    absl::StatusOr<Slot> slot = pool_->Allocate(meta.serialized_bytes());
    if (!slot.ok()) {
      failure = slot.status();
      break;
    }
    CHECK_OK(index_.Reserve(meta, *slot, until));
    made.push_back(meta.key);
    r.slot = *slot;
    results.push_back(r);
  }
  if (!failure.ok()) {
    for (const kvformat::BlockKey& key : made) RemoveLocked(key);
    if (metrics_) metrics_->reserve_rejected_total.Increment();
    LOG(WARNING) << "kvstore Reserve refused: " << failure;
    return failure;
  }
  if (metrics_) metrics_->blocks_reserved_total.Increment(static_cast<double>(made.size()));
  if (!made.empty()) pool_->ExpectPeerTraffic();
  return results;
}

absl::Status BlockStore::VerifyLocked(const IndexEntry& entry, bool check_payload,
                                      uint64_t* bf16_equivalent_bytes) {
  const BlockMeta& meta = entry.meta;
  kvformat::BlockExpectations expect;
  expect.key = meta.key;
  expect.codec = meta.codec;
  std::span<const std::byte> bytes = pool_->Bytes(entry.slot).first(meta.serialized_bytes());
  absl::StatusOr<kvformat::BlockHeader> header =
      check_payload ? transfer::VerifyBlockOnArrival(bytes, expect)
                    : kvformat::ParseBlockHeader(bytes, expect);
  if (!header.ok()) return header.status();
  if (header->payload_bytes != meta.payload_bytes ||
      header->payload_checksum != meta.payload_checksum ||
      header->token_count != meta.token_count || header->first_position != meta.first_position ||
      !(header->prev_key == meta.prev_key)) {
    return absl::DataLossError("block header differs from the reserved descriptor");
  }
  *bf16_equivalent_bytes =
      kvformat::kBlockHeaderBytes +
      kvformat::PayloadBytes(static_cast<kvformat::CodecId>(header->codec),
                             kvformat::BlockKind::kBf16, header->layer_count, header->kv_heads,
                             header->head_dim, header->token_count);
  return absl::OkStatus();
}

absl::StatusOr<size_t> BlockStore::Commit(std::span<const kvformat::BlockKey> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(clock_->Now());
  size_t committed = 0;
  absl::Status first_error;
  for (const kvformat::BlockKey& key : keys) {
    const IndexEntry* entry = index_.Find(key);
    absl::Status status;
    if (entry == nullptr) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "block ", kvformat::BlockKeyToHex(key), " is not reserved (or its reservation expired)"));
    } else if (entry->state == EntryState::kCommitted) {
      continue;  // idempotent
    } else {
      uint64_t bf16_bytes = 0;
      status = VerifyLocked(*entry, options_.verify_on_commit, &bf16_bytes);
      if (status.ok()) {
        const uint64_t bytes = entry->meta.serialized_bytes();
        CHECK_OK(index_.Commit(key, bf16_bytes));
        policy_->OnInsert(key);
        ++committed;
        if (metrics_) {
          metrics_->blocks_committed_total.Increment();
          metrics_->committed_bytes_total.Increment(static_cast<double>(bytes));
        }
      } else {
        LOG(WARNING) << "kvstore dropped block " << kvformat::BlockKeyToHex(key)
                     << " at commit: " << status;
        if (metrics_) metrics_->commit_checksum_failures_total.Increment();
        RemoveLocked(key);
        status = absl::DataLossError(status.message());
      }
    }
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  if (!first_error.ok()) {
    return absl::Status(first_error.code(),
                        absl::StrCat(first_error.message(), " (", committed, " of ", keys.size(),
                                     " blocks committed)"));
  }
  return committed;
}

size_t BlockStore::Abort(std::span<const kvformat::BlockKey> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t aborted = 0;
  for (const kvformat::BlockKey& key : keys) {
    const IndexEntry* entry = index_.Find(key);
    if (entry == nullptr || entry->state != EntryState::kReserved) continue;
    RemoveLocked(key);
    ++aborted;
  }
  return aborted;
}

BlockStore::RecheckResult BlockStore::Recheck(std::span<const kvformat::BlockKey> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  RecheckResult result;
  for (const kvformat::BlockKey& key : keys) {
    const IndexEntry* entry = index_.Find(key);
    if (entry == nullptr || entry->state != EntryState::kCommitted) continue;
    uint64_t bf16_bytes = 0;
    const absl::Status status = VerifyLocked(*entry, /*check_payload=*/true, &bf16_bytes);
    if (status.ok()) {
      ++result.intact;
      continue;
    }
    // Readers holding a lease on it verify what they read, so freeing the slot now is safe.
    LOG(WARNING) << "kvstore dropped damaged block " << kvformat::BlockKeyToHex(key)
                 << " on recheck: " << status;
    RemoveLocked(key);
    ++result.dropped;
    if (metrics_) metrics_->damaged_blocks_dropped_total.Increment();
  }
  return result;
}

LookupResult BlockStore::LeaseLocked(std::vector<StoredBlock> blocks, absl::Duration lease,
                                     absl::Time now) {
  LookupResult result;
  std::vector<kvformat::BlockKey> keys;
  keys.reserve(blocks.size());
  for (const StoredBlock& b : blocks) {
    keys.push_back(b.meta.key);
    policy_->OnAccess(b.meta.key);
  }
  if (!keys.empty()) {
    result.lease_id = leases_.AddReadLease(
        keys, lease > absl::ZeroDuration() ? lease : options_.default_read_lease, now);
  }
  result.blocks = std::move(blocks);
  return result;
}

absl::StatusOr<LookupResult> BlockStore::LookupPrefix(std::span<const kvformat::BlockKey> chain,
                                                      absl::Duration lease) {
  if (chain.empty()) return absl::InvalidArgumentError("empty key chain");
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = clock_->Now();
  SweepLocked(now);
  const size_t matched = index_.LongestCommittedPrefix(chain);
  std::vector<StoredBlock> blocks;
  for (size_t i = 0; i < matched; ++i) {
    const IndexEntry* entry = index_.Find(chain[i]);
    blocks.push_back({entry->meta, entry->slot});
  }
  hits_ += matched;
  misses_ += chain.size() - matched;
  if (metrics_) {
    metrics_->lookups_total.Increment();
    metrics_->lookup_blocks_hit_total.Increment(static_cast<double>(matched));
    metrics_->lookup_blocks_miss_total.Increment(static_cast<double>(chain.size() - matched));
  }
  VLOG(1) << "LookupPrefix: " << matched << " of " << chain.size() << " blocks";
  LookupResult result = LeaseLocked(std::move(blocks), lease, now);
  result.matched = matched;
  if (matched > 0) pool_->ExpectPeerTraffic();
  return result;
}

LookupResult BlockStore::GetLocations(std::span<const kvformat::BlockKey> keys,
                                      absl::Duration lease) {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = clock_->Now();
  SweepLocked(now);
  std::vector<StoredBlock> blocks;
  for (const kvformat::BlockKey& key : keys) {
    const IndexEntry* entry = index_.Find(key);
    if (entry != nullptr && entry->state == EntryState::kCommitted) {
      blocks.push_back({entry->meta, entry->slot});
    }
  }
  hits_ += blocks.size();
  misses_ += keys.size() - blocks.size();
  if (metrics_) {
    metrics_->lookups_total.Increment();
    metrics_->lookup_blocks_hit_total.Increment(static_cast<double>(blocks.size()));
    metrics_->lookup_blocks_miss_total.Increment(static_cast<double>(keys.size() - blocks.size()));
  }
  LookupResult result = LeaseLocked(std::move(blocks), lease, now);
  result.matched = result.blocks.size();
  if (result.matched > 0) pool_->ExpectPeerTraffic();
  return result;
}

absl::StatusOr<BlockStore::PinResult> BlockStore::Pin(const std::string& session,
                                                      std::span<const kvformat::BlockKey> keys,
                                                      absl::Duration ttl) {
  if (session.empty()) return absl::InvalidArgumentError("Pin needs a session id");
  if (ttl <= absl::ZeroDuration() || ttl > options_.max_pin) {
    return absl::InvalidArgumentError(absl::StrCat("pin TTL ", absl::FormatDuration(ttl),
                                                   " outside (0, ",
                                                   absl::FormatDuration(options_.max_pin), "]"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = clock_->Now();
  SweepLocked(now);
  std::vector<kvformat::BlockKey> present;
  PinResult result;
  for (const kvformat::BlockKey& key : keys) {
    const IndexEntry* entry = index_.Find(key);
    if (entry != nullptr && entry->state == EntryState::kCommitted) {
      present.push_back(key);
    } else {
      ++result.missing;
    }
  }
  leases_.Pin(session, present, ttl, now);
  result.pinned = present.size();
  VLOG(1) << "session " << session << " pinned " << result.pinned << " blocks for "
          << absl::FormatDuration(ttl);
  return result;
}

BlockStore::ReleaseResult BlockStore::Release(const std::string& session,
                                              std::span<const kvformat::BlockKey> keys,
                                              std::span<const uint64_t> lease_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseResult result;
  if (!session.empty()) result.pins = leases_.ReleasePins(session, keys);
  for (uint64_t id : lease_ids) result.leases += leases_.ReleaseReadLease(id) ? 1 : 0;
  return result;
}

std::vector<kvformat::BlockKey> BlockStore::CommittedKeys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.CommittedKeys();
}

StoreStats BlockStore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StoreStats s;
  s.blocks = index_.committed_blocks();
  s.reserved_blocks = index_.reserved_blocks();
  s.capacity_bytes = pool_->capacity_bytes();
  s.used_bytes = pool_->used_bytes();
  for (int c = 0; c < kvformat::kNumCodecs; ++c) {
    const auto codec = static_cast<kvformat::CodecId>(c);
    const BlockIndex::CodecTotals& t = index_.totals(codec);
    if (t.blocks == 0) continue;
    s.by_codec.push_back({codec, t.blocks, t.stored_bytes, t.bf16_equivalent_bytes});
    if (t.bf16_equivalent_bytes > t.stored_bytes) {
      s.bytes_saved_vs_bf16 += t.bf16_equivalent_bytes - t.stored_bytes;
    }
  }
  s.lookup_block_hits = hits_;
  s.lookup_block_misses = misses_;
  s.hit_rate = hits_ + misses_ == 0 ? 0.0 : static_cast<double>(hits_) / (hits_ + misses_);
  s.evicted_blocks = evicted_;
  s.expired_reservations = expired_;
  s.pinned_blocks = leases_.pin_count();
  s.active_read_leases = leases_.read_lease_count();
  return s;
}

}  // namespace oscarkv::kvstore
