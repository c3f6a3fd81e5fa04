// Continuous batching without a model: a fake step whose logits make each sequence count up
// from its last token (next = token + 1, one-hot), recording every batch it sees. Checks that
// sequences join a running batch between steps, leave on stop token / length / cancel / error,
// and that each gets exactly its own tokens; and that penalties count the prefill's first token.
#include "services/decode/decode_batcher.h"

#include <chrono>
#include <cmath>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace oscarkv::decode {
namespace {

constexpr int kVocab = 64;

// The batcher only passes sequences through to the step.
struct FakeSequence final : HeldSequence {
  int64_t length() const override { return 0; }
  int64_t kv_bytes() const override { return 0; }
  int64_t reserved_kv_bytes() const override { return 0; }
  int64_t remaining_tokens() const override { return 1 << 20; }
};

struct FakeStep {
  std::mutex mu;
  std::vector<std::vector<HeldSequence*>> batches;
  std::chrono::milliseconds delay{2};
  bool fail = false;
  int32_t always = -1;  // >= 0: every row's one-hot is this token instead of token + 1
  bool gives_argmax = false;  // like the GPU device: answers an argmax request with ids only
  int argmax_asked = 0, argmax_given = 0;  // steps that asked for the argmax / got ids only

  StepFunction Fn() {
    return [this](std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
                  std::vector<float>* logits, std::vector<int32_t>* argmax) -> absl::Status {
      std::this_thread::sleep_for(delay);
      std::lock_guard<std::mutex> lock(mu);
      if (fail) return absl::InternalError("boom");
      batches.emplace_back(seqs.begin(), seqs.end());
      auto hot = [&](size_t b) { return always >= 0 ? always : (tokens[b] + 1) % kVocab; };
      argmax_asked += argmax != nullptr;
      if (argmax != nullptr && gives_argmax) {
        ++argmax_given;
        logits->clear();
        argmax->clear();
        for (size_t b = 0; b < seqs.size(); ++b) argmax->push_back(hot(b));
        return absl::OkStatus();
      }
      logits->assign(seqs.size() * kVocab, 0.0f);
      for (size_t b = 0; b < seqs.size(); ++b) (*logits)[b * kVocab + hot(b)] = 1;
      return absl::OkStatus();
    };
  }
};

struct Result {
  std::vector<int32_t> tokens;
  std::promise<FinishReason> done;
};

BatchRequest Make(HeldSequence* seq, int32_t first, int max_new, Result* r,
                  std::vector<int32_t> stops = {}) {
  BatchRequest q;
  q.sequence = seq;
  q.first_token = first;
  q.max_new_tokens = max_new;
  q.stop_token_ids = std::move(stops);
  q.on_token = [r](int32_t t, const engine::TokenLogprobs*) {
    r->tokens.push_back(t);
    return true;
  };
  q.on_done = [r](FinishReason reason, const absl::Status&) { r->done.set_value(reason); };
  return q;
}

TEST(DecodeBatcher, SequencesJoinARunningBatchAndLeaveAtTheirLength) {
  FakeStep step;
  step.delay = std::chrono::milliseconds(5);
  DecodeBatcher batcher(step.Fn(), kVocab, 8);
  FakeSequence a, b;
  Result ra, rb;
  batcher.Submit(Make(&a, 0, 20, &ra));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a is mid-generation
  batcher.Submit(Make(&b, 30, 3, &rb));
  EXPECT_EQ(rb.done.get_future().get(), FinishReason::kLength);
  EXPECT_EQ(ra.done.get_future().get(), FinishReason::kLength);
  // Each got its own count-up, exactly max_new_tokens long.
  ASSERT_EQ(ra.tokens.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ra.tokens[i], i + 1);
  EXPECT_EQ(rb.tokens, (std::vector<int32_t>{31, 32, 33}));
  // b joined while a ran (a batch of two exists), and left before a (a batch of one after it).
  std::lock_guard<std::mutex> lock(step.mu);
  size_t first_pair = 0, last_pair = 0;
  for (size_t i = 0; i < step.batches.size(); ++i) {
    if (step.batches[i].size() == 2) {
      if (first_pair == 0) first_pair = i;
      last_pair = i;
    }
  }
  EXPECT_GT(first_pair, 0u) << "b never joined a's batch";
  EXPECT_EQ(last_pair - first_pair + 1, 3u);  // b was in exactly 3 steps
  EXPECT_EQ(step.batches.back().size(), 1u);
  EXPECT_EQ(step.batches.front()[0], &a);
  EXPECT_EQ(batcher.stats().tokens, 23u);
  EXPECT_EQ(batcher.stats().max_batch_seen, 2u);
}

TEST(DecodeBatcher, StopTokenEndsWithoutBeingDelivered) {
  FakeStep step;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a;
  Result r;
  batcher.Submit(Make(&a, 10, 50, &r, {14}));
  EXPECT_EQ(r.done.get_future().get(), FinishReason::kStop);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{11, 12, 13}));
}

// The model always prefers token 5 (logit 1, others 0). With presence penalty 2 each generated
// token drops to -1 or -2, so greedy walks 0, 1, 2, ...: 5 is never picked, because the first
// token (5, from the prefill) counts as generated.
TEST(DecodeBatcher, PenaltiesCountTheFirstToken) {
  FakeStep step;
  step.always = 5;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a, b;
  Result penalized, plain;
  BatchRequest q = Make(&a, 5, 7, &penalized);
  q.sampling.presence_penalty = 2.0f;
  batcher.Submit(std::move(q));
  batcher.Submit(Make(&b, 5, 3, &plain));
  EXPECT_EQ(penalized.done.get_future().get(), FinishReason::kLength);
  EXPECT_EQ(plain.done.get_future().get(), FinishReason::kLength);
  EXPECT_EQ(penalized.tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(plain.tokens, (std::vector<int32_t>{5, 5, 5}));
}

// A generation resumed from another worker: the tokens before its first count as generated.
TEST(DecodeBatcher, PenaltiesCountTheEarlierTokensOfAResumedGeneration) {
  FakeStep step;
  step.always = 5;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a;
  Result resumed;
  BatchRequest q = Make(&a, 5, 7, &resumed);
  q.earlier_tokens = {0, 1};
  q.sampling.presence_penalty = 2.0f;
  batcher.Submit(std::move(q));
  EXPECT_EQ(resumed.done.get_future().get(), FinishReason::kLength);
  EXPECT_EQ(resumed.tokens, (std::vector<int32_t>{2, 3, 4, 6, 7, 8, 9}));
}

// Logprobs come from the same logits row the token was sampled from: one-hot logit 1 among 63
// zeros gives log p = 1 - log(e + 63), and the best alternative after it is id 0 at -log(e + 63).
TEST(DecodeBatcher, LogprobsAreThoseOfTheSampledRow) {
  FakeStep step;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a, b;
  Result with, without;
  std::vector<engine::TokenLogprobs> seen;
  int nulls = 0;
  BatchRequest q = Make(&a, 10, 3, &with);
  q.logprobs = 2;
  q.on_token = [&](int32_t t, const engine::TokenLogprobs* lp) {
    with.tokens.push_back(t);
    if (lp != nullptr) seen.push_back(*lp);
    return true;
  };
  batcher.Submit(std::move(q));
  BatchRequest q2 = Make(&b, 20, 3, &without);
  q2.on_token = [&](int32_t t, const engine::TokenLogprobs* lp) {
    without.tokens.push_back(t);
    nulls += lp == nullptr;
    return true;
  };
  batcher.Submit(std::move(q2));
  EXPECT_EQ(with.done.get_future().get(), FinishReason::kLength);
  EXPECT_EQ(without.done.get_future().get(), FinishReason::kLength);
  EXPECT_EQ(nulls, 3);
  ASSERT_EQ(seen.size(), 3u);
  const double log_z = std::log(std::exp(1.0) + 63.0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].token, 11 + i);
    EXPECT_NEAR(seen[i].logprob, 1.0 - log_z, 1e-6);
    ASSERT_EQ(seen[i].top.size(), 2u);
    EXPECT_EQ(seen[i].top[0].first, 11 + i);
    EXPECT_EQ(seen[i].top[1].first, 0);
    EXPECT_NEAR(seen[i].top[1].second, -log_z, 1e-6);
  }
}

// Batches of 8 sample their rows on the CPU pool: every sequence gets the tokens it gets when
// it runs alone (its own seeded sampler, temperature 1, its own logprobs), and each step's
// sampling time reaches on_sampled.
TEST(DecodeBatcher, PooledSamplingGivesEachSequenceItsOwnTokens) {
  constexpr int kSequences = 8, kTokens = 12;
  auto run = [](const std::vector<int>& which, std::vector<std::vector<int32_t>>* tokens,
                std::vector<std::vector<float>>* logprobs, int* sampled_steps) {
    FakeStep step;
    step.delay = std::chrono::milliseconds(0);
    int observed = 0;
    DecodeBatcher batcher(step.Fn(), kVocab, kSequences, [&observed](double seconds) {
      EXPECT_GE(seconds, 0.0);
      ++observed;
    });
    std::vector<FakeSequence> seqs(which.size());
    std::vector<Result> results(which.size());
    for (size_t i = 0; i < which.size(); ++i) {
      const int s = which[i];
      BatchRequest q = Make(&seqs[i], s, kTokens, &results[i]);
      q.sampling.temperature = 1.0f;
      q.sampling.seed = 100 + s;
      q.logprobs = 1;
      q.on_token = [&, i, s](int32_t t, const engine::TokenLogprobs* lp) {
        (*tokens)[s].push_back(t);
        (*logprobs)[s].push_back(lp != nullptr && lp->token == t ? lp->logprob : NAN);
        return true;
      };
      batcher.Submit(std::move(q));
    }
    for (Result& r : results) EXPECT_EQ(r.done.get_future().get(), FinishReason::kLength);
    batcher.Stop();
    *sampled_steps += observed;
  };
  std::vector<std::vector<int32_t>> together(kSequences), alone(kSequences);
  std::vector<std::vector<float>> together_lp(kSequences), alone_lp(kSequences);
  int steps_together = 0, steps_alone = 0;
  std::vector<int> all(kSequences);
  for (int s = 0; s < kSequences; ++s) all[s] = s;
  run(all, &together, &together_lp, &steps_together);
  for (int s = 0; s < kSequences; ++s) run({s}, &alone, &alone_lp, &steps_alone);
  for (int s = 0; s < kSequences; ++s) {
    ASSERT_EQ(together[s].size(), static_cast<size_t>(kTokens)) << s;
    EXPECT_EQ(together[s], alone[s]) << "sequence " << s;
    for (float lp : together_lp[s]) EXPECT_TRUE(std::isfinite(lp)) << "sequence " << s;
    EXPECT_EQ(together_lp[s], alone_lp[s]) << "sequence " << s;
  }
  EXPECT_GE(steps_together, kTokens);  // every step reports its sampling
  EXPECT_GE(steps_alone, kSequences * kTokens);
}

// Steps whose rows are all plain greedy ask the device for the argmax alone; a device that gives
// it (the GPU) sends no logits, and the tokens are the same. A row sampling at temperature,
// asking for logprobs or under a penalty makes its steps take the logits again.
TEST(DecodeBatcher, AllGreedyStepsTakeTheDevicesArgmax) {
  for (const bool gives : {false, true}) {
    SCOPED_TRACE(gives ? "device gives the argmax" : "device gives logits");
    FakeStep step;
    step.gives_argmax = gives;
    DecodeBatcher batcher(step.Fn(), kVocab, 4);
    FakeSequence a, b;
    Result ra, rb;
    BatchRequest qa = Make(&a, 0, 6, &ra);
    qa.logprobs = -1;
    batcher.Submit(std::move(qa));
    BatchRequest qb = Make(&b, 40, 4, &rb);
    qb.logprobs = -1;
    batcher.Submit(std::move(qb));
    EXPECT_EQ(ra.done.get_future().get(), FinishReason::kLength);
    EXPECT_EQ(rb.done.get_future().get(), FinishReason::kLength);
    EXPECT_EQ(ra.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(rb.tokens, (std::vector<int32_t>{41, 42, 43, 44}));
    batcher.Stop();
    std::lock_guard<std::mutex> lock(step.mu);
    EXPECT_EQ(step.argmax_asked, static_cast<int>(step.batches.size()));
    EXPECT_EQ(step.argmax_given, gives ? step.argmax_asked : 0);
  }
  FakeStep step;
  step.gives_argmax = true;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a, b, c;
  Result ra, rb, rc;
  BatchRequest greedy = Make(&a, 0, 5, &ra);
  greedy.logprobs = -1;
  BatchRequest scored = Make(&b, 10, 5, &rb);  // logprobs 2
  BatchRequest penalized = Make(&c, 20, 5, &rc);
  penalized.logprobs = -1;
  penalized.sampling.presence_penalty = 0.1f;
  batcher.Submit(std::move(greedy));
  batcher.Submit(std::move(scored));
  batcher.Submit(std::move(penalized));
  for (Result* r : {&ra, &rb, &rc}) EXPECT_EQ(r->done.get_future().get(), FinishReason::kLength);
  EXPECT_EQ(ra.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(rb.tokens, (std::vector<int32_t>{11, 12, 13, 14, 15}));
  EXPECT_EQ(rc.tokens, (std::vector<int32_t>{21, 22, 23, 24, 25}));
  batcher.Stop();
  std::lock_guard<std::mutex> lock(step.mu);
  size_t all_three = 0;
  for (const auto& batch : step.batches) all_three += batch.size() == 3;
  EXPECT_GT(all_three, 0u);
  // Only steps without the scored and penalized rows may ask (the greedy one alone, if any).
  EXPECT_LE(static_cast<size_t>(step.argmax_asked), step.batches.size() - all_three);
}

TEST(DecodeBatcher, CancelAndCallbackFalseLeaveTheBatch) {
  FakeStep step;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a, b;
  Result ra, rb;
  const uint64_t id = batcher.Submit(Make(&a, 0, 1000000, &ra));
  BatchRequest qb = Make(&b, 0, 1000000, &rb);
  qb.on_token = [&rb](int32_t t, const engine::TokenLogprobs*) {
    rb.tokens.push_back(t);
    return rb.tokens.size() < 5;
  };
  batcher.Submit(std::move(qb));
  EXPECT_EQ(rb.done.get_future().get(), FinishReason::kCancelled);
  EXPECT_EQ(rb.tokens.size(), 5u);
  batcher.Cancel(id);
  EXPECT_EQ(ra.done.get_future().get(), FinishReason::kCancelled);
  // Load is updated by the loop right after the callbacks of a step.
  for (int i = 0; i < 100 && batcher.Load() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(batcher.Load(), 0);
}

TEST(DecodeBatcher, StepErrorFailsTheBatchAndStopCancelsTheRest) {
  FakeStep step;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a;
  Result ra;
  {
    std::lock_guard<std::mutex> lock(step.mu);
    step.fail = true;
  }
  batcher.Submit(Make(&a, 0, 10, &ra));
  EXPECT_EQ(ra.done.get_future().get(), FinishReason::kError);

  {
    std::lock_guard<std::mutex> lock(step.mu);
    step.fail = false;
  }
  FakeSequence b;
  Result rb;
  batcher.Submit(Make(&b, 0, 1000000, &rb));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  batcher.Stop();
  EXPECT_EQ(rb.done.get_future().get(), FinishReason::kCancelled);
  Result rc;
  FakeSequence c;
  batcher.Submit(Make(&c, 0, 3, &rc));  // after Stop: finishes at once
  EXPECT_EQ(rc.done.get_future().get(), FinishReason::kCancelled);
}

// A worker shutting down stops its batcher with a reason: what still runs, and what is submitted
// after, fails with it (the router resumes such generations elsewhere).
TEST(DecodeBatcher, StopWithAReasonFailsWhatStillRunsWithIt) {
  FakeStep step;
  DecodeBatcher batcher(step.Fn(), kVocab, 4);
  FakeSequence a, b;
  Result ra, rb;
  absl::Status sa, sb;
  BatchRequest qa = Make(&a, 0, 1000000, &ra);
  qa.on_done = [&](FinishReason reason, const absl::Status& s) {
    sa = s;
    ra.done.set_value(reason);
  };
  batcher.Submit(std::move(qa));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  batcher.Stop(absl::UnavailableError("shutting down"));
  EXPECT_EQ(ra.done.get_future().get(), FinishReason::kError);
  EXPECT_TRUE(absl::IsUnavailable(sa)) << sa;
  EXPECT_FALSE(ra.tokens.empty());
  BatchRequest qb = Make(&b, 0, 3, &rb);
  qb.on_done = [&](FinishReason reason, const absl::Status& s) {
    sb = s;
    rb.done.set_value(reason);
  };
  batcher.Submit(std::move(qb));
  EXPECT_EQ(rb.done.get_future().get(), FinishReason::kError);
  EXPECT_EQ(sb.message(), "shutting down");
}

TEST(DecodeBatcher, MaxBatchIsRespected) {
  FakeStep step;
  DecodeBatcher batcher(step.Fn(), kVocab, 2);
  std::vector<FakeSequence> seqs(5);
  std::vector<Result> rs(5);
  for (int i = 0; i < 5; ++i) batcher.Submit(Make(&seqs[i], i, 4, &rs[i]));
  for (auto& r : rs) EXPECT_EQ(r.done.get_future().get(), FinishReason::kLength);
  std::lock_guard<std::mutex> lock(step.mu);
  for (const auto& b : step.batches) EXPECT_LE(b.size(), 2u);
}

}  // namespace
}  // namespace oscarkv::decode
