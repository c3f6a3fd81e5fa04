#include "services/kvstore/block_pool.h"

#include <random>

#include "gtest/gtest.h"
#include "tests/testing/fake_transfer_backend.h"

namespace oscarkv::kvstore {
namespace {

TEST(BlockPool, CapacityLimitIsEnforced) {
  auto pool = BlockPool::Create(4096, nullptr);
  ASSERT_TRUE(pool.ok());
  auto a = (*pool)->Allocate(1000);  // rounds to 1024
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->length, 1024u);
  auto b = (*pool)->Allocate(3072);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*pool)->used_bytes(), 4096u);
  EXPECT_EQ((*pool)->Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  (*pool)->Free(*a);
  EXPECT_EQ((*pool)->largest_free_bytes(), 1024u);
  EXPECT_EQ((*pool)->Allocate(2048).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE((*pool)->Allocate(1024).ok());
}

TEST(BlockPool, FreedNeighboursCoalesce) {
  auto pool = BlockPool::Create(1 << 20, nullptr);
  ASSERT_TRUE(pool.ok());
  std::mt19937 rng(5);
  std::vector<Slot> slots;
  for (int i = 0; i < 64; ++i) {
    auto s = (*pool)->Allocate(256 * (1 + rng() % 16));
    ASSERT_TRUE(s.ok());
    slots.push_back(*s);
  }
  // Slots never overlap.
  std::sort(slots.begin(), slots.end(), [](auto& x, auto& y) { return x.offset < y.offset; });
  for (size_t i = 1; i < slots.size(); ++i) {
    EXPECT_LE(slots[i - 1].offset + slots[i - 1].length, slots[i].offset);
  }
  std::shuffle(slots.begin(), slots.end(), rng);
  for (const Slot& s : slots) (*pool)->Free(s);
  EXPECT_EQ((*pool)->used_bytes(), 0u);
  EXPECT_EQ((*pool)->largest_free_bytes(), 1u << 20);  // one range again
}

TEST(BlockPool, RegistersOnceWithTheBackendAndIsWritableThroughIt) {
  oscarkv::testing::FakeTransferBackend store_backend, client_backend;
  auto pool = BlockPool::Create(64 << 10, &store_backend);
  ASSERT_TRUE(pool.ok());
  const transfer::RegisteredMemory& reg = (*pool)->registration();
  EXPECT_FALSE(reg.remote_descriptor.empty());
  auto slot = (*pool)->Allocate(4096);
  ASSERT_TRUE(slot.ok());
  std::vector<std::byte> data(4096, std::byte{0x5a});
  auto local = client_backend.RegisterMemory(data);
  ASSERT_TRUE(local.ok());
  ASSERT_TRUE(transfer::TransferAndWait(
                  client_backend, {"fake", {{local->handle, 0, reg.remote_descriptor,
                                             slot->offset, 4096, transfer::Direction::kPut}}})
                  .ok());
  for (std::byte b : (*pool)->Bytes(*slot)) ASSERT_EQ(b, std::byte{0x5a});
  EXPECT_EQ(BlockPool::Create(0, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

// Sizes near 2^64 (a "-1" read as unsigned) used to wrap to 0 when aligned.
TEST(BlockPool, SizesThatOverflowWhenAlignedAreRejected) {
  EXPECT_EQ(BlockPool::Create(UINT64_MAX, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto pool = BlockPool::Create(4096, nullptr);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->Allocate(UINT64_MAX).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*pool)->Allocate(UINT64_MAX - 255).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*pool)->used_bytes(), 0u);
}

}  // namespace
}  // namespace oscarkv::kvstore
