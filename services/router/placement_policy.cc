#include "services/router/placement_policy.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace oscarkv::router {
namespace {

int Matched(const std::map<std::string, int>& matched, const std::string& id) {
  auto it = matched.find(id);
  return it == matched.end() ? 0 : it->second;
}

// What the kvstore holds under the keys prefill worker `w` computes; 0 if it skips the store.
int StoreMatched(const PlacementRequest& request, const WorkerSpec& w) {
  return w.bypasses_kvstore ? 0 : Matched(request.store_matched, w.kv_numerics);
}

bool HasRole(const WorkerView& w, WorkerRole role) {
  return w.spec.role == role || w.spec.role == WorkerRole::kBoth;
}

struct Candidate {
  const WorkerView* worker;
  WorkerScore score;
};

// Lowest cost, then fewest active requests, then smallest id.
const Candidate* Best(const std::vector<Candidate>& candidates) {
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates) {
    if (best == nullptr ||
        std::make_tuple(c.score.cost, c.worker->ActiveRequests(), c.worker->spec.id) <
            std::make_tuple(best->score.cost, best->worker->ActiveRequests(),
                            best->worker->spec.id)) {
      best = &c;
    }
  }
  return best;
}

absl::Status NoWorker(WorkerRole role, int alive) {
  if (alive == 0) {
    return absl::UnavailableError(
        absl::StrCat("no healthy ", std::string(WorkerRoleName(role)), " worker is registered"));
  }
  return absl::ResourceExhaustedError(absl::StrCat("all ", alive, " healthy ",
                                                   std::string(WorkerRoleName(role)),
                                                   " workers are at capacity; retry later"));
}

}  // namespace

CostPlacementPolicy::CostPlacementPolicy(CostPlacementOptions options) : options_(options) {
  CHECK(options_.overlap_weight >= 0);
  CHECK(options_.shared_credit >= 0 && options_.shared_credit <= 1);
  CHECK(options_.active_request_weight >= 0);
  CHECK(options_.block_tokens >= 1);
}

absl::StatusOr<Placement> CostPlacementPolicy::Choose(
    const PlacementRequest& request, const std::vector<WorkerView>& workers) const {
  const double bt = options_.block_tokens;
  const int request_blocks =
      static_cast<int>((request.prompt_tokens + options_.block_tokens - 1) / options_.block_tokens);

  std::vector<Candidate> prefill, decode;
  int prefill_alive = 0, decode_alive = 0;
  for (const WorkerView& w : workers) {
    const bool alive = w.health == WorkerHealth::kHealthy && !w.draining;
    const int m = Matched(request.matched, w.spec.id);
    const double active_cost = options_.active_request_weight * w.ActiveRequests();
    if (HasRole(w, WorkerRole::kPrefill)) {
      prefill_alive += alive;
      if (w.Placeable()) {
        const int store = StoreMatched(request, w.spec);
        const double credit = m + options_.shared_credit * std::max(0, store - m);
        const double blocks =
            std::max(0.0, request_blocks - credit) + static_cast<double>(w.PrefillTokens()) / bt;
        prefill.push_back({&w, {w.spec.id, m, blocks, options_.overlap_weight * blocks + active_cost}});
      }
    }
    if (HasRole(w, WorkerRole::kDecode)) {
      decode_alive += alive;
      if (w.Placeable()) {
        const double blocks =
            static_cast<double>(w.DecodeBlocks()) + std::max(0, request_blocks - m);
        decode.push_back({&w, {w.spec.id, m, blocks, blocks + active_cost}});
      }
    }
  }
  const Candidate* p = Best(prefill);
  if (p == nullptr) return NoWorker(WorkerRole::kPrefill, prefill_alive);
  const Candidate* d = Best(decode);
  if (d == nullptr) return NoWorker(WorkerRole::kDecode, decode_alive);

  Placement out;
  out.prefill_id = p->worker->spec.id;
  out.prefill_address = p->worker->spec.address;
  out.decode_id = d->worker->spec.id;
  out.decode_address = d->worker->spec.address;
  out.prefill_matched_blocks = p->score.matched_blocks;
  out.store_matched_blocks = StoreMatched(request, p->worker->spec);
  out.request_blocks = request_blocks;
  out.cost = p->score.cost + d->score.cost;
  for (const Candidate& c : prefill) out.prefill_scores.push_back(c.score);
  for (const Candidate& c : decode) out.decode_scores.push_back(c.score);
  VLOG(1) << "placement: prefill=" << out.prefill_id << " (matched " << out.prefill_matched_blocks
          << "/" << request_blocks << ", store " << out.store_matched_blocks
          << ") decode=" << out.decode_id << " cost=" << out.cost
          << " session=" << request.session_id;
  return out;
}

}  // namespace oscarkv::router
