// BlockStore with real serialised blocks written into its pool through a (fake) transfer backend.
#include "services/kvstore/block_store.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "gtest/gtest.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/block.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_transfer_backend.h"
#include "tests/testing/test_blocks.h"

namespace oscarkv::kvstore {
namespace {

using kvformat::BlockKey;
using oscarkv::testing::MakeTestBlock;

BlockKey K(uint64_t i) { return {i, 0xabc0 + i}; }

BlockMeta MetaOf(std::span<const std::byte> block) {
  auto header = kvformat::ParseBlockHeader(block);
  CHECK(header.ok()) << header.status();
  BlockMeta m;
  m.key = header->key;
  m.prev_key = header->prev_key;
  m.codec = static_cast<kvformat::CodecId>(header->codec);
  m.kind = static_cast<kvformat::BlockKind>(header->block_kind);
  m.first_position = header->first_position;
  m.token_count = header->token_count;
  m.payload_bytes = header->payload_bytes;
  m.payload_checksum = header->payload_checksum;
  return m;
}

// One BF16 (layer, head) block: 16 KiB + 128 B, a 16640-byte slot.
constexpr uint64_t kSlot = 16640;

class BlockStoreTest : public ::testing::Test {
 protected:
  void MakeStore(uint64_t capacity, BlockStoreOptions options = {}) {
    auto pool = BlockPool::Create(capacity, &store_backend_);
    ASSERT_TRUE(pool.ok());
    store_ = std::make_unique<BlockStore>(options, *std::move(pool),
                                          std::make_unique<LruEvictionPolicy>(), &clock_,
                                          nullptr);
  }
  std::vector<std::byte> Block(uint64_t i) {
    return MakeTestBlock(i, 1, 1, K(i), i == 1 ? BlockKey{0, 0} : K(i - 1));
  }
  // Reserve, put through the client backend, commit.
  absl::Status Store(uint64_t i, std::vector<std::byte> block = {}) {
    if (block.empty()) block = Block(i);
    const BlockMeta meta = MetaOf(block);
    OSCARKV_ASSIGN_OR_RETURN(auto reserved, store_->Reserve(std::vector{meta}, absl::ZeroDuration()));
    if (reserved[0].already_stored) return absl::OkStatus();
    OSCARKV_RETURN_IF_ERROR(Put(block, reserved[0].slot));
    return store_->Commit(std::vector{meta.key}).status();
  }
  absl::Status Put(std::vector<std::byte>& block, const Slot& slot) {
    OSCARKV_ASSIGN_OR_RETURN(auto local, client_backend_.RegisterMemory(block));
    absl::Status s = transfer::TransferAndWait(
        client_backend_, {"fake", {{local.handle, 0, store_->registration().remote_descriptor,
                                    slot.offset, block.size(), transfer::Direction::kPut}}});
    OSCARKV_RETURN_IF_ERROR(client_backend_.DeregisterMemory(local.handle));
    return s;
  }
  size_t Prefix(std::vector<BlockKey> chain) {
    auto r = store_->LookupPrefix(chain, absl::Milliseconds(1));
    CHECK(r.ok());
    return r->matched;
  }

  oscarkv::testing::FakeClock clock_;
  oscarkv::testing::FakeTransferBackend store_backend_, client_backend_;
  std::unique_ptr<BlockStore> store_;
};

TEST_F(BlockStoreTest, PrefixLookupReturnsCommittedBlocksWithLocations) {
  MakeStore(16 * kSlot);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Store(i).ok());
  auto r = store_->LookupPrefix(std::vector{K(1), K(2), K(3), K(4)}, absl::ZeroDuration());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->matched, 3u);
  ASSERT_EQ(r->blocks.size(), 3u);
  EXPECT_NE(r->lease_id, 0u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r->blocks[i].meta.key, K(i + 1));
    EXPECT_EQ(r->blocks[i].slot.length, kSlot);
  }
  EXPECT_EQ(Prefix({K(2), K(3)}), 2u);  // any starting point of a stored chain
  EXPECT_EQ(Prefix({K(9)}), 0u);
  EXPECT_EQ(store_->LookupPrefix({}, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_EQ(s.lookup_block_hits, 3u + 2u);
  EXPECT_EQ(s.lookup_block_misses, 1u + 1u);
  EXPECT_DOUBLE_EQ(s.hit_rate, 5.0 / 7.0);
}

TEST_F(BlockStoreTest, CommittedKeysListStoredBlocksOnly) {
  MakeStore(4 * kSlot);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Store(i).ok());
  // A reservation that is not committed is not listed.
  const std::vector<std::byte> pending = Block(9);
  ASSERT_TRUE(store_->Reserve(std::vector{MetaOf(pending)}, absl::ZeroDuration()).ok());
  auto sorted = [](std::vector<BlockKey> v) {
    std::sort(v.begin(), v.end(), [](const BlockKey& a, const BlockKey& b) {
      return std::tie(a.hi, a.lo) < std::tie(b.hi, b.lo);
    });
    return v;
  };
  EXPECT_EQ(sorted(store_->CommittedKeys()), sorted({K(1), K(2), K(3)}));
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(store_->Abort(std::vector{MetaOf(pending).key}), 1u);
  ASSERT_TRUE(Store(4).ok());
  ASSERT_TRUE(Store(5).ok());  // full: evicts the least recently used (1)
  EXPECT_EQ(sorted(store_->CommittedKeys()), sorted({K(2), K(3), K(4), K(5)}));
}

TEST_F(BlockStoreTest, CapacityLimitEvictsLeastRecentlyUsed) {
  MakeStore(3 * kSlot);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Store(i).ok());
  clock_.Advance(absl::Seconds(1));  // lookups' 1 ms leases end
  EXPECT_EQ(Prefix({K(1)}), 1u);     // touch 1: LRU order 2 3 1
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Store(4).ok());        // evicts 2
  EXPECT_EQ(Prefix({K(2)}), 0u);
  EXPECT_EQ(Prefix({K(1)}), 1u);
  EXPECT_EQ(Prefix({K(3)}), 1u);
  EXPECT_EQ(Prefix({K(4)}), 1u);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.evicted_blocks, 1u);
  EXPECT_EQ(s.used_bytes, 3 * kSlot);
  EXPECT_LE(s.used_bytes, s.capacity_bytes);
}

TEST_F(BlockStoreTest, PinsAreRespectedUntilTheirTtlEnds) {
  MakeStore(2 * kSlot);
  ASSERT_TRUE(Store(1).ok());
  ASSERT_TRUE(Store(2).ok());
  auto pin = store_->Pin("session-a", std::vector{K(1), K(2), K(7)}, absl::Seconds(30));
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->pinned, 2u);
  EXPECT_EQ(pin->missing, 1u);
  EXPECT_EQ(Store(3).code(), absl::StatusCode::kResourceExhausted);  // all pinned
  EXPECT_EQ(store_->Stats().blocks, 2u);
  clock_.Advance(absl::Seconds(31));  // pins expire
  ASSERT_TRUE(Store(3).ok());
  EXPECT_EQ(Prefix({K(1)}), 0u);  // the LRU one went
  EXPECT_EQ(Prefix({K(2)}), 1u);
  EXPECT_EQ(store_->Pin("", std::vector{K(2)}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Pin("s", std::vector{K(2)}, absl::Hours(48)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(BlockStoreTest, ReleasedPinMakesBlockEvictable) {
  MakeStore(1 * kSlot);
  ASSERT_TRUE(Store(1).ok());
  ASSERT_TRUE(store_->Pin("s", std::vector{K(1)}, absl::Hours(1)).ok());
  EXPECT_EQ(Store(2).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store_->Release("s", {}, {}).pins, 1u);
  EXPECT_TRUE(Store(2).ok());
}

TEST_F(BlockStoreTest, ReadLeasesBlockEvictionUntilReleasedOrExpired) {
  MakeStore(1 * kSlot);
  ASSERT_TRUE(Store(1).ok());
  auto r = store_->LookupPrefix(std::vector{K(1)}, absl::Seconds(10));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Store(2).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store_->Release("", {}, std::vector{r->lease_id}).leases, 1u);
  ASSERT_TRUE(Store(2).ok());
  auto g = store_->GetLocations(std::vector{K(1), K(2)}, absl::Seconds(10));
  EXPECT_EQ(g.blocks.size(), 1u);
  EXPECT_EQ(Store(3).code(), absl::StatusCode::kResourceExhausted);
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(Store(3).ok());
}

TEST_F(BlockStoreTest, UncommittedReservationExpires) {
  MakeStore(1 * kSlot, {.default_reservation = absl::Seconds(5)});
  std::vector<std::byte> block = Block(1);
  auto reserved = store_->Reserve(std::vector{MetaOf(block)}, absl::ZeroDuration());
  ASSERT_TRUE(reserved.ok());
  EXPECT_EQ(store_->Stats().reserved_blocks, 1u);
  // A second writer of the same key is told it is in flight.
  auto again = store_->Reserve(std::vector{MetaOf(block)}, absl::ZeroDuration());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)[0].in_flight);
  EXPECT_EQ(Store(2).code(), absl::StatusCode::kResourceExhausted);  // reservations don't evict
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Put(block, (*reserved)[0].slot).ok());
  EXPECT_EQ(store_->Commit(std::vector{K(1)}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Stats().reserved_blocks, 0u);
  EXPECT_EQ(store_->Stats().expired_reservations, 1u);
  EXPECT_TRUE(Store(2).ok());
}

TEST_F(BlockStoreTest, CorruptedBlockIsRefusedAtCommit) {
  MakeStore(4 * kSlot);
  std::vector<std::byte> block = Block(1);
  const BlockMeta meta = MetaOf(block);
  auto reserved = store_->Reserve(std::vector{meta}, absl::ZeroDuration());
  ASSERT_TRUE(reserved.ok());
  client_backend_.CorruptNextTransfers(1);
  ASSERT_TRUE(Put(block, (*reserved)[0].slot).ok());
  EXPECT_EQ(store_->Commit(std::vector{meta.key}).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Prefix({K(1)}), 0u);
  EXPECT_EQ(store_->Stats().used_bytes, 0u);  // the slot was freed
  // A block whose bytes differ from what was reserved (another key) is refused too.
  std::vector<std::byte> other = Block(2);
  reserved = store_->Reserve(std::vector{meta}, absl::ZeroDuration());
  ASSERT_TRUE(reserved.ok());
  ASSERT_TRUE(Put(other, (*reserved)[0].slot).ok());
  EXPECT_FALSE(store_->Commit(std::vector{meta.key}).ok());
  // And a clean retry works.
  EXPECT_TRUE(Store(1).ok());
  EXPECT_EQ(Prefix({K(1)}), 1u);
}

// A committed block whose stored bytes are damaged afterwards (here: overwritten with a copy
// corrupted in transit) is dropped on recheck, so that it can be stored again; an intact block
// is kept, and unknown keys are skipped.
TEST_F(BlockStoreTest, RecheckDropsADamagedBlockAndKeepsIntactOnes) {
  MakeStore(4 * kSlot);
  ASSERT_TRUE(Store(1).ok());
  ASSERT_TRUE(Store(2).ok());
  auto found = store_->LookupPrefix(std::vector{K(1), K(2)}, absl::Milliseconds(1));
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->matched, 2u);
  std::vector<std::byte> block = Block(2);
  client_backend_.CorruptNextTransfers(1);
  ASSERT_TRUE(Put(block, found->blocks[1].slot).ok());

  BlockStore::RecheckResult r = store_->Recheck(std::vector{K(1), K(2), K(9)});
  EXPECT_EQ(r.intact, 1u);
  EXPECT_EQ(r.dropped, 1u);
  EXPECT_EQ(Prefix({K(1), K(2)}), 1u);
  // Stored again by the next writer, then whole.
  ASSERT_TRUE(Store(2).ok());
  EXPECT_EQ(Prefix({K(1), K(2)}), 2u);
  r = store_->Recheck(std::vector{K(1), K(2)});
  EXPECT_EQ(r.intact, 2u);
  EXPECT_EQ(r.dropped, 0u);
}

TEST_F(BlockStoreTest, ReserveIsAllOrNothingAndReportsStoredBlocks) {
  MakeStore(2 * kSlot);
  ASSERT_TRUE(Store(1).ok());
  ASSERT_TRUE(store_->Pin("s", std::vector{K(1)}, absl::Hours(1)).ok());
  std::vector<BlockMeta> metas = {MetaOf(Block(1)), MetaOf(Block(2)), MetaOf(Block(3))};
  EXPECT_EQ(store_->Reserve(metas, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store_->Stats().reserved_blocks, 0u);  // block 2's reservation was rolled back
  metas.pop_back();
  auto r = store_->Reserve(metas, absl::ZeroDuration());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].already_stored);
  EXPECT_FALSE((*r)[1].already_stored);
  metas = {MetaOf(Block(4)), MetaOf(Block(4))};
  EXPECT_EQ(store_->Reserve(metas, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(BlockStoreTest, StatsCountBytesSavedAgainstBf16) {
  MakeStore(1 << 20);
  // An OSCAR (M6) history block of 2 layers x 2 heads x head_dim 64 and a BF16 block.
  std::vector<std::byte> oscar = MakeTestBlock(5, 2, 2, K(10), {0, 0}, kvformat::CodecId::kOscar,
                                               kvformat::BlockKind::kQuantized);
  ASSERT_TRUE(Store(10, oscar).ok());
  ASSERT_TRUE(Store(1).ok());
  const StoreStats s = store_->Stats();
  ASSERT_EQ(s.by_codec.size(), 2u);
  const uint64_t oscar_payload = kvformat::PayloadBytes(
      kvformat::CodecId::kOscar, kvformat::BlockKind::kQuantized, 2, 2, 64, 64);
  const uint64_t bf16_payload = kvformat::PayloadBytes(
      kvformat::CodecId::kOscar, kvformat::BlockKind::kBf16, 2, 2, 64, 64);
  for (const auto& c : s.by_codec) {
    if (c.codec == kvformat::CodecId::kOscar) {
      EXPECT_EQ(c.stored_bytes, 128 + oscar_payload);
      EXPECT_EQ(c.bf16_equivalent_bytes, 128 + bf16_payload);
    } else {
      EXPECT_EQ(c.codec, kvformat::CodecId::kBf16);
      EXPECT_EQ(c.stored_bytes, c.bf16_equivalent_bytes);
    }
  }
  EXPECT_EQ(s.bytes_saved_vs_bf16, bf16_payload - oscar_payload);
  EXPECT_GT(bf16_payload, 6 * oscar_payload);  // 16 bits vs 2.5 bits per element at D = 64
}

}  // namespace
}  // namespace oscarkv::kvstore
