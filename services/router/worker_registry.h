// WorkerRegistry: which prefill and decode workers exist, where they listen, how loaded they are
// and whether they are alive. Workers register, then heartbeat; a worker that misses heartbeats
// becomes kSuspect and then kDead (never placed on). A draining worker finishes its requests but
// gets no new ones. The router also counts, per worker, the requests it placed there and has not
// seen finish (router-side load, updated between heartbeats so bursts spread out).
//
// Thread-safe: every method takes the one internal mutex; no callbacks run under it.
#ifndef OSCARKV_SERVICES_ROUTER_WORKER_REGISTRY_H_
#define OSCARKV_SERVICES_ROUTER_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace oscarkv::router {

// kBoth: an aggregated worker that can take either part. kKvStore: the block store, which
// registers and heartbeats (its held keys feed placement) but is never placed on.
enum class WorkerRole { kPrefill, kDecode, kBoth, kKvStore };
enum class WorkerHealth { kHealthy, kSuspect, kDead };

std::string_view WorkerRoleName(WorkerRole role);  // "prefill", "decode", "both", "kvstore"
std::string_view WorkerHealthName(WorkerHealth health);  // "healthy", "suspect", "dead"
absl::StatusOr<WorkerRole> ParseWorkerRole(std::string_view name);

// What a worker says about itself when it registers.
struct WorkerSpec {
  std::string id;       // unique, non-empty, e.g. "prefill-0"
  WorkerRole role = WorkerRole::kPrefill;
  std::string address;  // gRPC address "host:port", non-empty
  int capacity = 1;     // concurrent requests it accepts, >= 1
  // Hands over (prefill) or takes (decode) a prompt's KV GPU to GPU in packed form
  // (WorkerInfo.packed_kv_direct).
  bool packed_kv_direct = false;
  // The `numerics` label of the block keys of the KV it makes ("" = the CPU engine), and whether
  // its prefill skips the kvstore (WorkerInfo.kv_numerics, .bypasses_kvstore).
  std::string kv_numerics;
  bool bypasses_kvstore = false;
};

// Load a worker reports in a heartbeat.
struct WorkerLoad {
  int active_requests = 0;         // requests running on the worker
  int64_t queued_prefill_tokens = 0;  // prompt tokens waiting for or in prefill
  int64_t active_decode_blocks = 0;   // KV blocks held by running decode sequences
};

// A point-in-time copy of one worker's state, as placement sees it.
struct WorkerView {
  WorkerSpec spec;
  WorkerHealth health = WorkerHealth::kHealthy;
  bool draining = false;
  WorkerLoad reported;              // from the last heartbeat
  int router_active_requests = 0;   // placed by this router, not yet finished
  int64_t router_prefill_tokens = 0;  // prompt tokens of those requests
  int64_t router_decode_blocks = 0;   // prompt+max_tokens blocks of those requests (upper bound)
  absl::Time last_heartbeat;

  // The larger of the reported and the router-side counts: each side may lag the other.
  int ActiveRequests() const;
  int64_t PrefillTokens() const;
  int64_t DecodeBlocks() const;
  bool Placeable() const;  // healthy, not draining, below capacity
};

struct WorkerRegistryOptions {
  absl::Duration heartbeat_interval = absl::Seconds(2);  // Default: 2 s
  int suspect_after_missed = 1;  // Default: 1 missed heartbeat → kSuspect (not placed on)
  int dead_after_missed = 3;     // Default: 3 missed heartbeats → kDead
  std::function<absl::Time()> now = absl::Now;  // Default: wall clock; tests inject a fake
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(WorkerRegistryOptions options);

  //! Adds a worker, or replaces the spec of a known id (a restarted worker re-registers) and
  //! marks it healthy. @return kInvalidArgument for an empty id/address or capacity < 1.
  absl::Status Register(const WorkerSpec& spec);

  //! Records a heartbeat: the worker is alive as of now, with `load`.
  //! @return kNotFound for an unknown id (the worker must register again).
  absl::Status Heartbeat(const std::string& id, const WorkerLoad& load);

  //! Stops placing new requests on the worker; its running requests continue.
  //! @return kNotFound for an unknown id.
  absl::Status Drain(const std::string& id);

  //! Forgets the worker. @return kNotFound for an unknown id.
  absl::Status Deregister(const std::string& id);

  //! Router-side load accounting: a request was placed on / finished on worker `id`. Unknown ids
  //! are ignored (the worker may have been removed meanwhile).
  void AddPlaced(const std::string& id, int64_t prefill_tokens, int64_t decode_blocks);
  void RemovePlaced(const std::string& id, int64_t prefill_tokens, int64_t decode_blocks);

  //! Recomputes health from heartbeat age: a heartbeat counts as missed once it is half an
  //! interval late, missed = floor((now - last - interval / 2) / interval).
  //! Returns the ids whose health changed. Called by Snapshot() too.
  std::vector<std::string> UpdateHealth();

  //! All workers (any health), sorted by id, with health updated as of now.
  std::vector<WorkerView> Snapshot();

  //! The workers of `role` that can take a new request (kBoth workers count for both roles).
  std::vector<WorkerView> Placeable(WorkerRole role);

  //! One worker. @return kNotFound for an unknown id.
  absl::StatusOr<WorkerView> Get(const std::string& id);

 private:
  std::vector<std::string> UpdateHealthLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerRegistryOptions options_;
  absl::Mutex mu_;
  std::map<std::string, WorkerView> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_WORKER_REGISTRY_H_
