// TokenPool: admission by reserved bytes, live usage, generate exclusivity, keep/release, idle
// and keep expiry.
#include "services/decode/token_pool.h"

#include "gtest/gtest.h"

namespace oscarkv::decode {
namespace {

// Ten bytes a token; reserved for `max_length` tokens.
struct FakeSequence final : HeldSequence {
  FakeSequence(int64_t length, int64_t max_length) : length_(length), max_length_(max_length) {}
  int64_t length() const override { return length_; }
  int64_t kv_bytes() const override { return 10 * length_; }
  int64_t reserved_kv_bytes() const override { return 10 * max_length_; }
  int64_t remaining_tokens() const override { return max_length_ - length_; }
  int64_t length_;
  const int64_t max_length_;
};

std::unique_ptr<PooledSequence> Entry(int64_t tokens, int64_t max_new = 0,
                                      FakeSequence** seq = nullptr) {
  auto e = std::make_unique<PooledSequence>();
  auto s = std::make_unique<FakeSequence>(tokens, tokens + max_new);
  if (seq != nullptr) *seq = s.get();
  e->sequence = std::move(s);
  return e;
}

TEST(TokenPool, CapacityKeepReleaseAndExpiry) {
  TokenPool pool(1000, absl::Seconds(10), /*bf16_bytes_per_token=*/70);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  FakeSequence* seq_a = nullptr;
  absl::StatusOr<uint64_t> a = pool.Insert(Entry(55, 5, &seq_a), t0);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.Insert(Entry(50), t0).status()));
  absl::StatusOr<uint64_t> b = pool.Insert(Entry(40), t0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.Usage().kv_bytes, 950);
  EXPECT_EQ(pool.Usage().reserved_bytes, 1000);
  EXPECT_EQ(pool.Usage().bf16_equivalent_bytes, 95 * 70);

  ASSERT_TRUE(pool.BeginGenerate(*a).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(pool.BeginGenerate(*a).status()));
  EXPECT_EQ(pool.Sweep(t0 + absl::Seconds(100)), 1);  // b expired; a is generating
  seq_a->length_ = 60;  // grown while generating: read at once, not at its end
  EXPECT_EQ(pool.Usage().kv_bytes, 600);
  EXPECT_EQ(pool.Usage().reserved_bytes, 600);
  pool.FinishGenerate(*a, t0 + absl::Seconds(100));

  ASSERT_TRUE(pool.Keep(*a, absl::Seconds(50), t0 + absl::Seconds(100)).ok());
  EXPECT_EQ(pool.Sweep(t0 + absl::Seconds(140)), 0);  // kept beyond the idle TTL
  EXPECT_EQ(pool.Sweep(t0 + absl::Seconds(151)), 1);
  EXPECT_TRUE(absl::IsNotFound(pool.Release(*a).status()));
  EXPECT_EQ(pool.Usage().sequences, 0);
  EXPECT_EQ(pool.Usage().kv_bytes, 0);
  EXPECT_EQ(pool.Usage().reserved_bytes, 0);
}

// Admission counts what a sequence may grow to, not what it holds: two sequences whose prompts
// fit but whose generations together would not are not both admitted; releasing one makes room.
TEST(TokenPool, AdmitsBySizeAtTheLongestASequenceMayGrowTo) {
  TokenPool pool(1000, absl::Seconds(10), 70);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  absl::StatusOr<uint64_t> a = pool.Insert(Entry(10, 50), t0);  // holds 100 B, may grow to 600
  ASSERT_TRUE(a.ok());
  absl::StatusOr<uint64_t> b = pool.Insert(Entry(10, 40), t0);  // would grow to 500: 1100 in all
  ASSERT_TRUE(absl::IsResourceExhausted(b.status()));
  EXPECT_NE(b.status().message().find("--kv_capacity_bytes"), std::string::npos) << b.status();
  EXPECT_EQ(pool.Usage().kv_bytes, 100);
  ASSERT_TRUE(pool.Insert(Entry(10, 30), t0).ok());  // 400: exactly full
  EXPECT_EQ(pool.Usage().reserved_bytes, 1000);
  ASSERT_TRUE(pool.Release(*a).ok());
  EXPECT_TRUE(pool.Insert(Entry(10, 40), t0).ok());
  EXPECT_EQ(pool.Usage().reserved_bytes, 900);
}

// EndTurn(release) right after a cancelled Generate, while the sequence is still in the batch
// for a step: the release holds, and the sequence goes when its Generate finishes.
TEST(TokenPool, AReleaseWhileGeneratingTakesEffectWhenItFinishes) {
  TokenPool pool(1000, absl::Seconds(10), 70);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  absl::StatusOr<uint64_t> a = pool.Insert(Entry(10, 40), t0);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool.BeginGenerate(*a).ok());
  bool deferred = false;
  absl::StatusOr<int64_t> released = pool.Release(*a, &deferred);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 100);
  EXPECT_TRUE(deferred);
  EXPECT_EQ(pool.Usage().sequences, 1);  // still stepping
  EXPECT_TRUE(absl::IsNotFound(pool.Release(*a).status()));  // released once
  pool.FinishGenerate(*a, t0);
  EXPECT_EQ(pool.Usage().sequences, 0);
  EXPECT_EQ(pool.Usage().reserved_bytes, 0);
  absl::StatusOr<uint64_t> b = pool.Insert(Entry(10, 40), t0);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(pool.Release(*b, &deferred).ok());
  EXPECT_FALSE(deferred);
  EXPECT_EQ(pool.Usage().sequences, 0);
}

TEST(TokenPool, ReservedIdsAreUsedOnceAndNeverHandedOutAgain) {
  TokenPool pool(1000, absl::Seconds(10), 70);
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
