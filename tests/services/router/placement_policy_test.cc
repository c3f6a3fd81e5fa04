#include "services/router/placement_policy.h"

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace oscarkv::router {
namespace {

WorkerView Worker(const std::string& id, WorkerRole role, int64_t prefill_tokens = 0,
                  int64_t decode_blocks = 0, int active = 0, int capacity = 8) {
  WorkerView w;
  w.spec = {id, role, id + ":1", capacity};
  w.reported.queued_prefill_tokens = prefill_tokens;
  w.reported.active_decode_blocks = decode_blocks;
  w.reported.active_requests = active;
  return w;
}

CostPlacementPolicy Policy(double overlap_weight = 1.0, double shared_credit = 0.75,
                           double active_weight = 0.0) {
  return CostPlacementPolicy({overlap_weight, shared_credit, active_weight, /*block_tokens=*/64});
}

TEST(CostPlacementPolicy, LongerPrefixWinsAtEqualLoad) {
  PlacementRequest req{640, 16, "", {{"p1", 6}, {"p0", 2}}};  // 10 blocks
  auto p = Policy().Choose(req, {Worker("p0", WorkerRole::kPrefill),
                                 Worker("p1", WorkerRole::kPrefill),
                                 Worker("d0", WorkerRole::kDecode)});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prefill_id, "p1");
  EXPECT_EQ(p->prefill_matched_blocks, 6);
  EXPECT_EQ(p->request_blocks, 10);
  EXPECT_EQ(p->prefill_address, "p1:1");
  EXPECT_EQ(p->decode_id, "d0");
}

TEST(CostPlacementPolicy, QueuedPrefillOutweighsSmallOverlap) {
  // p1 holds 2 more blocks but has 5 blocks (320 tokens) queued: 8 + 5 > 10 + 0.
  PlacementRequest req{640, 16, "", {{"p1", 2}}};
  auto p = Policy().Choose(req, {Worker("p0", WorkerRole::kPrefill),
                                 Worker("p1", WorkerRole::kPrefill, /*prefill_tokens=*/320),
                                 Worker("d0", WorkerRole::kDecode)});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->prefill_id, "p0");
  // With overlap weighted 3x the queue still dominates equally (both terms scale), so the
  // choice is unchanged; the decode part is unweighted.
  auto q = Policy(3.0).Choose(req, {Worker("p0", WorkerRole::kPrefill),
                                    Worker("p1", WorkerRole::kPrefill, 320),
                                    Worker("d0", WorkerRole::kDecode, 0, 7)});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->prefill_id, "p0");
  EXPECT_DOUBLE_EQ(q->cost, 3.0 * 10 + (7 + 10));
}

TEST(CostPlacementPolicy, KvStoreBlocksGiveEveryPrefillWorkerPartialCredit) {
  PlacementRequest req{640, 0, "", {{"p1", 4}}, {{"", 8}}};
  auto p = Policy(1.0, 0.75).Choose(req, {Worker("p0", WorkerRole::kPrefill),
                                          Worker("p1", WorkerRole::kPrefill),
                                          Worker("d0", WorkerRole::kDecode)});
  ASSERT_TRUE(p.ok());
  // p0: 10 - 0.75*8 = 4; p1: 10 - (4 + 0.75*4) = 3.
  EXPECT_EQ(p->prefill_id, "p1");
  EXPECT_EQ(p->store_matched_blocks, 8);
  ASSERT_EQ(p->prefill_scores.size(), 2u);
  EXPECT_DOUBLE_EQ(p->prefill_scores[0].cost, 4.0);
  EXPECT_DOUBLE_EQ(p->prefill_scores[1].cost, 3.0);
}

// GPU-made KV is keyed under the worker's numerics label: the kvstore's blocks under a label
// credit only the prefill workers that compute that label's keys and read the store.
TEST(CostPlacementPolicy, KvStoreCreditFollowsTheWorkersNumericsLabel) {
  WorkerView cpu = Worker("p-cpu", WorkerRole::kPrefill);
  WorkerView gpu = Worker("p-gpu", WorkerRole::kPrefill);
  gpu.spec.kv_numerics = "cuda-x";
  WorkerView one_pass = Worker("p-onepass", WorkerRole::kPrefill);
  one_pass.spec.kv_numerics = "cuda-x";
  one_pass.spec.bypasses_kvstore = true;
  PlacementRequest req{640, 0, "", {}, {{"cuda-x", 8}, {"", 2}}};
  auto p = Policy(1.0, 0.75).Choose(req, {cpu, gpu, one_pass, Worker("d0", WorkerRole::kDecode)});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prefill_id, "p-gpu");
  EXPECT_EQ(p->store_matched_blocks, 8);
  ASSERT_EQ(p->prefill_scores.size(), 3u);
  EXPECT_DOUBLE_EQ(p->prefill_scores[0].cost, 10 - 0.75 * 2);  // p-cpu: the CPU-keyed blocks
  EXPECT_DOUBLE_EQ(p->prefill_scores[1].cost, 10 - 0.75 * 8);  // p-gpu
  EXPECT_DOUBLE_EQ(p->prefill_scores[2].cost, 10.0);           // p-onepass: no store credit
  // Without its label's blocks in the store, the GPU worker has no edge: the tie goes by id.
  req.store_matched = {{"", 2}};
  p = Policy(1.0, 0.75).Choose(req, {cpu, gpu, Worker("d0", WorkerRole::kDecode)});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prefill_id, "p-cpu");
  EXPECT_EQ(p->store_matched_blocks, 2);
}

TEST(CostPlacementPolicy, DecodeWorkerHoldingTheSessionIsPreferred) {
  // d1 still holds the session's first 9 blocks (pinned KV) and carries more load.
  PlacementRequest req{640, 64, "session-7", {{"d1", 9}}};
  auto p = Policy().Choose(req, {Worker("p0", WorkerRole::kPrefill),
                                 Worker("d0", WorkerRole::kDecode, 0, 4),
                                 Worker("d1", WorkerRole::kDecode, 0, 10)});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->decode_id, "d1");  // 10 + 1 = 11 < 4 + 10 = 14
}

TEST(CostPlacementPolicy, TiesGoToFewerActiveRequestsThenSmallerId) {
  PlacementRequest req{64, 1, "", {}};
  auto p = Policy().Choose(req, {Worker("p1", WorkerRole::kPrefill, 0, 0, 0),
                                 Worker("p0", WorkerRole::kPrefill, 0, 0, 1),
                                 Worker("d1", WorkerRole::kDecode),
                                 Worker("d0", WorkerRole::kDecode)});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->prefill_id, "p1");
  EXPECT_EQ(p->decode_id, "d0");
}

TEST(CostPlacementPolicy, NoWorkersIsUnavailableFullWorkersIsResourceExhausted) {
  PlacementRequest req{64, 1, "", {}};
  EXPECT_TRUE(absl::IsUnavailable(Policy().Choose(req, {Worker("d0", WorkerRole::kDecode)}).status()));
  EXPECT_TRUE(absl::IsUnavailable(Policy().Choose(req, {Worker("p0", WorkerRole::kPrefill)}).status()));
  WorkerView dead = Worker("p0", WorkerRole::kPrefill);
  dead.health = WorkerHealth::kDead;
  EXPECT_TRUE(absl::IsUnavailable(
      Policy().Choose(req, {dead, Worker("d0", WorkerRole::kDecode)}).status()));
  auto full = Policy().Choose(req, {Worker("p0", WorkerRole::kPrefill, 0, 0, /*active=*/2, 2),
                                    Worker("d0", WorkerRole::kDecode)});
  EXPECT_TRUE(absl::IsResourceExhausted(full.status())) << full.status();
  // An aggregated worker serves both parts.
  auto agg = Policy().Choose(req, {Worker("a0", WorkerRole::kBoth)});
  ASSERT_TRUE(agg.ok());
  EXPECT_EQ(agg->prefill_id, "a0");
  EXPECT_EQ(agg->decode_id, "a0");
}

// The policy's pick must be a minimum of the pair cost written out directly from the formula in
// placement_policy.h, evaluated in float64 over every (prefill, decode) pair.
TEST(CostPlacementPolicy, PickMinimisesThePairCostOnRandomClusters) {
  std::mt19937_64 rng(20261129);
  for (int trial = 0; trial < 500; ++trial) {
    const double ow = std::uniform_real_distribution<double>(0, 3)(rng);
    const double sc = std::uniform_real_distribution<double>(0, 1)(rng);
    const double aw = std::uniform_real_distribution<double>(0, 2)(rng);
    const int bt = 64;
    const int64_t prompt = std::uniform_int_distribution<int64_t>(1, 4000)(rng);
    const int rb = static_cast<int>((prompt + bt - 1) / bt);
    PlacementRequest req{prompt, 32, "", {}};
    std::uniform_int_distribution<int> matched(0, rb);
    const std::array<std::string, 2> labels = {"", "cuda-a"};
    for (const std::string& label : labels) req.store_matched[label] = matched(rng);
    std::vector<WorkerView> workers;
    const int n = std::uniform_int_distribution<int>(2, 8)(rng);
    for (int i = 0; i < n; ++i) {
      const WorkerRole role = std::array{WorkerRole::kPrefill, WorkerRole::kDecode,
                                         WorkerRole::kBoth}[rng() % 3];
      WorkerView w = Worker("w" + std::to_string(i), role, rng() % 2000, rng() % 300,
                            static_cast<int>(rng() % 4), 4);
      if (rng() % 7 == 0) w.health = WorkerHealth::kSuspect;
      w.spec.kv_numerics = labels[rng() % 2];
      w.spec.bypasses_kvstore = rng() % 5 == 0;
      workers.push_back(w);
      req.matched[w.spec.id] = matched(rng);
    }
    auto p = CostPlacementPolicy({ow, sc, aw, bt}).Choose(req, workers);

    double best = std::numeric_limits<double>::infinity();
    double chosen = std::numeric_limits<double>::quiet_NaN();
    for (const WorkerView& pw : workers) {
      if (!pw.Placeable() || pw.spec.role == WorkerRole::kDecode) continue;
      for (const WorkerView& dw : workers) {
        if (!dw.Placeable() || dw.spec.role == WorkerRole::kPrefill) continue;
        const double mp = req.matched[pw.spec.id], md = req.matched[dw.spec.id];
        const double ms =
            pw.spec.bypasses_kvstore ? 0.0 : req.store_matched[pw.spec.kv_numerics];
        const double credit = mp + sc * std::max(0.0, ms - mp);
        const double prefill_blocks =
            std::max(0.0, rb - credit) + static_cast<double>(pw.reported.queued_prefill_tokens) / bt;
        const double decode_blocks = dw.reported.active_decode_blocks + std::max(0.0, rb - md);
        const double cost = ow * prefill_blocks + decode_blocks +
                            aw * (pw.reported.active_requests + dw.reported.active_requests);
        best = std::min(best, cost);
        if (p.ok() && pw.spec.id == p->prefill_id && dw.spec.id == p->decode_id) chosen = cost;
      }
    }
    if (std::isinf(best)) {
      EXPECT_FALSE(p.ok()) << "trial " << trial;
      continue;
    }
    ASSERT_TRUE(p.ok()) << "trial " << trial << ": " << p.status();
    EXPECT_NEAR(chosen, best, 1e-9 * std::max(1.0, best)) << "trial " << trial;
    EXPECT_NEAR(p->cost, best, 1e-9 * std::max(1.0, best)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace oscarkv::router
