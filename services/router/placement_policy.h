// Placement: which (prefill, decode) worker pair serves a request. The interface is
// PlacementPolicy; CostPlacementPolicy is the standard one, after Dynamo's KV router
// (reference/systems.md §4.6, legacy documented form `cost = overlap_weight·prefill_blocks +
// decode_blocks`), split for disaggregated serving:
//
//   request_blocks   = ceil(prompt_tokens / block_tokens)
//   credit(p)        = matched(p) + shared_credit · max(0, store(p) − matched(p))
//   prefill_blocks(p)= max(0, request_blocks − credit(p)) + queued_prefill_tokens(p)/block_tokens
//   decode_blocks(d) = active_decode_blocks(d) + max(0, request_blocks − matched(d))
//   cost(p, d)       = overlap_weight · prefill_blocks(p) + decode_blocks(d)
//                      + active_request_weight · (active(p) + active(d))
//
// matched(w) is the number of the request's leading block keys that w holds (PrefixIndex);
// store(p) is what the kvstore holds under the keys p computes (its numerics label: GPU-made KV
// is keyed apart from the CPU engine's), fetchable at a discount (`shared_credit`, Dynamo's
// host-tier 0.75), and 0 for a worker that bypasses the kvstore. A decode worker that still
// holds a session's pinned KV (Continuum) matches it and so needs fewer new blocks. The cost
// separates into a prefill part and a decode part, so each is minimised on its own; ties go to
// fewer active requests, then to the smaller worker id (deterministic).
//
// Thread-safety: Choose() is const and may be called concurrently.
#ifndef OSCARKV_SERVICES_ROUTER_PLACEMENT_POLICY_H_
#define OSCARKV_SERVICES_ROUTER_PLACEMENT_POLICY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/router/worker_registry.h"

namespace oscarkv::router {

// The PrefixIndex holder name under which the kvstore's blocks are indexed.
inline constexpr char kStoreHolder[] = "kvstore";

struct PlacementRequest {
  int64_t prompt_tokens = 0;  // > 0
  int max_tokens = 0;         // >= 0; counted into the decode worker's future load
  std::string session_id;     // "" when none; for logs (pinned KV shows up through `matched`)
  // Worker id → matched leading blocks (PrefixIndex::MatchAll); missing means 0.
  std::map<std::string, int> matched;
  // Numerics label → leading blocks the kvstore holds under the keys of that label; missing
  // means 0.
  std::map<std::string, int> store_matched;
};

struct WorkerScore {
  std::string id;
  int matched_blocks = 0;
  double blocks = 0;  // prefill_blocks(p) or decode_blocks(d) above
  double cost = 0;    // this worker's part of cost(p, d)
};

struct Placement {
  std::string prefill_id;
  std::string prefill_address;
  std::string decode_id;
  std::string decode_address;
  int prefill_matched_blocks = 0;  // held by the chosen prefill worker itself
  int store_matched_blocks = 0;    // held by the kvstore under the chosen prefill's keys
  int request_blocks = 0;
  double cost = 0;                 // cost(p, d) of the chosen pair
  std::vector<WorkerScore> prefill_scores;  // every candidate, for logs and tests
  std::vector<WorkerScore> decode_scores;
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  //! Picks a pair among `workers` (a WorkerRegistry::Snapshot(); unplaceable ones are skipped).
  //! @return kUnavailable when no healthy, non-draining worker of a role exists;
  //! kResourceExhausted when such workers exist but all are at capacity.
  virtual absl::StatusOr<Placement> Choose(const PlacementRequest& request,
                                           const std::vector<WorkerView>& workers) const = 0;
};

struct CostPlacementOptions {
  double overlap_weight = 1.0;         // Default: 1.0 (Dynamo overlap_score_weight); >= 0
  double shared_credit = 0.75;         // Default: 0.75 per kvstore-held block; in [0, 1]
  double active_request_weight = 0.0;  // Default: 0.0 (Dynamo's default); >= 0
  int block_tokens = 64;               // Default: 64 tokens per block; >= 1
};

class CostPlacementPolicy final : public PlacementPolicy {
 public:
  explicit CostPlacementPolicy(CostPlacementOptions options);
  absl::StatusOr<Placement> Choose(const PlacementRequest& request,
                                   const std::vector<WorkerView>& workers) const override;

 private:
  const CostPlacementOptions options_;
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_PLACEMENT_POLICY_H_
