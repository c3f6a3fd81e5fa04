// TokenPool: capacity, generate exclusivity, keep/release, idle and keep expiry.
#include "services/decode/token_pool.h"

#include "gtest/gtest.h"

namespace oscarkv::decode {
namespace {

struct FakeSequence final : HeldSequence {
  int64_t length() const override { return 0; }
  int64_t kv_bytes() const override { return 0; }
};

std::unique_ptr<PooledSequence> Entry(int64_t bytes) {
  auto e = std::make_unique<PooledSequence>();
  e->sequence = std::make_unique<FakeSequence>();
  e->kv_bytes = bytes;
  e->bf16_equivalent_bytes = bytes * 7;
  return e;
}

TEST(TokenPool, CapacityKeepReleaseAndExpiry) {
  TokenPool pool(1000, absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  absl::StatusOr<uint64_t> a = pool.Insert(Entry(600), t0);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.Insert(Entry(500), t0).status()));
  absl::StatusOr<uint64_t> b = pool.Insert(Entry(400), t0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.Usage().kv_bytes, 1000);
  EXPECT_EQ(pool.Usage().bf16_equivalent_bytes, 7000);

  ASSERT_TRUE(pool.BeginGenerate(*a).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(pool.BeginGenerate(*a).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(pool.Release(*a).status()));
  EXPECT_EQ(pool.Sweep(t0 + absl::Seconds(100)), 1);  // b expired; a is generating
  pool.FinishGenerate(*a, 650, 4550, t0 + absl::Seconds(100));
  EXPECT_EQ(pool.Usage().kv_bytes, 650);

  ASSERT_TRUE(pool.Keep(*a, absl::Seconds(50), t0 + absl::Seconds(100)).ok());
  EXPECT_EQ(pool.Sweep(t0 + absl::Seconds(140)), 0);  // kept beyond the idle TTL
  EXPECT_EQ(pool.Sweep(t0 + absl::Seconds(151)), 1);
  EXPECT_TRUE(absl::IsNotFound(pool.Release(*a).status()));
  EXPECT_EQ(pool.Usage().sequences, 0);
  EXPECT_EQ(pool.Usage().kv_bytes, 0);
}

TEST(TokenPool, ReservedIdsAreUsedOnceAndNeverHandedOutAgain) {
  TokenPool pool(1000, absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const uint64_t reserved = pool.ReserveId();
  absl::StatusOr<uint64_t> other = pool.Insert(Entry(10), t0);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, reserved);
  auto e = Entry(10);
  e->id = reserved;
  absl::StatusOr<uint64_t> got = pool.Insert(std::move(e), t0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, reserved);
  auto dup = Entry(10);
  dup->id = reserved;
  EXPECT_TRUE(absl::IsAlreadyExists(pool.Insert(std::move(dup), t0).status()));
}

}  // namespace
}  // namespace oscarkv::decode
