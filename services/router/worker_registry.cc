#include "services/router/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace oscarkv::router {

std::string_view WorkerRoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kBoth:
      return "both";
    case WorkerRole::kKvStore:
      return "kvstore";
  }
  return "unknown";
}

std::string_view WorkerHealthName(WorkerHealth health) {
  switch (health) {
    case WorkerHealth::kHealthy:
      return "healthy";
    case WorkerHealth::kSuspect:
      return "suspect";
    case WorkerHealth::kDead:
      return "dead";
  }
  return "unknown";
}

absl::StatusOr<WorkerRole> ParseWorkerRole(std::string_view name) {
  if (name == "prefill") return WorkerRole::kPrefill;
  if (name == "decode") return WorkerRole::kDecode;
  if (name == "both") return WorkerRole::kBoth;
  if (name == "kvstore") return WorkerRole::kKvStore;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown worker role '", std::string(name), "' (expected prefill, decode, both or kvstore)"));
}

int WorkerView::ActiveRequests() const {
  return std::max(reported.active_requests, router_active_requests);
}
int64_t WorkerView::PrefillTokens() const {
  return std::max(reported.queued_prefill_tokens, router_prefill_tokens);
}
int64_t WorkerView::DecodeBlocks() const {
  return std::max(reported.active_decode_blocks, router_decode_blocks);
}
bool WorkerView::Placeable() const {
  return health == WorkerHealth::kHealthy && !draining && ActiveRequests() < spec.capacity;
}

WorkerRegistry::WorkerRegistry(WorkerRegistryOptions options) : options_(std::move(options)) {
  CHECK(options_.heartbeat_interval > absl::ZeroDuration());
  CHECK(options_.suspect_after_missed >= 1);
  CHECK(options_.dead_after_missed >= options_.suspect_after_missed);
  CHECK(options_.now != nullptr);
}

absl::Status WorkerRegistry::Register(const WorkerSpec& spec) {
  if (spec.id.empty()) return absl::InvalidArgumentError("worker id must not be empty");
  if (spec.address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", spec.id, ": empty address"));
  }
  if (spec.capacity < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", spec.id, ": capacity must be >= 1, got ", spec.capacity));
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = workers_.try_emplace(spec.id);
  WorkerView& w = it->second;
  // A second worker started with the same id would take the first one's place silently (the
  // first kept heartbeating and got no more requests). A worker that restarted elsewhere
  // registers once the old entry has missed a heartbeat (its registration retries meanwhile).
  const bool other_alive =
      !inserted && w.spec.address != spec.address && !w.draining &&
      options_.now() - w.last_heartbeat < options_.heartbeat_interval * 3 / 2;
  if (other_alive) {
    LOG(WARNING) << "refused registration of worker " << spec.id << " at " << spec.address
                 << ": that id belongs to a live worker at " << w.spec.address;
    return absl::AlreadyExistsError(absl::StrCat(
        "worker id '", spec.id, "' is registered by a live worker at ", w.spec.address,
        "; give each worker its own --worker_id"));
  }
  w.spec = spec;
  w.health = WorkerHealth::kHealthy;
  w.draining = false;
  w.reported = WorkerLoad{};
  w.last_heartbeat = options_.now();
  LOG(INFO) << (inserted ? "worker registered: " : "worker re-registered: ") << spec.id
            << " role=" << WorkerRoleName(spec.role) << " address=" << spec.address
            << " capacity=" << spec.capacity
            << (spec.kv_numerics.empty() ? "" : " kv_numerics=" + spec.kv_numerics)
            << (spec.bypasses_kvstore ? " (bypasses the kvstore)" : "");
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Heartbeat(const std::string& id, const WorkerLoad& load) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown worker '", id, "': register first"));
  }
  WorkerView& w = it->second;
  w.reported = load;
  w.last_heartbeat = options_.now();
  if (w.health != WorkerHealth::kHealthy) {
    LOG(INFO) << "worker " << id << " healthy again (was " << WorkerHealthName(w.health) << ")";
    w.health = WorkerHealth::kHealthy;
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Drain(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker '", id, "'"));
  if (!it->second.draining) LOG(INFO) << "worker draining: " << id;
  it->second.draining = true;
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Deregister(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (workers_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrCat("unknown worker '", id, "'"));
  }
  LOG(INFO) << "worker deregistered: " << id;
  return absl::OkStatus();
}

void WorkerRegistry::AddPlaced(const std::string& id, int64_t prefill_tokens,
                               int64_t decode_blocks) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.router_active_requests += 1;
  it->second.router_prefill_tokens += prefill_tokens;
  it->second.router_decode_blocks += decode_blocks;
}

void WorkerRegistry::RemovePlaced(const std::string& id, int64_t prefill_tokens,
                                  int64_t decode_blocks) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  WorkerView& w = it->second;
  w.router_active_requests = std::max(0, w.router_active_requests - 1);
  w.router_prefill_tokens = std::max<int64_t>(0, w.router_prefill_tokens - prefill_tokens);
  w.router_decode_blocks = std::max<int64_t>(0, w.router_decode_blocks - decode_blocks);
}

std::vector<std::string> WorkerRegistry::UpdateHealthLocked() {
  std::vector<std::string> changed;
  const absl::Time now = options_.now();
  for (auto& [id, w] : workers_) {
    // A heartbeat is missed once it is half an interval late. Without the grace a worker that
    // heartbeats exactly every interval was suspect from the end of each interval until its next
    // heartbeat landed, and requests placed in that window failed (seen as a 503 "no healthy
    // decode worker" in e2e_four_process_test on a loaded 2-core machine).
    absl::Duration rem;  // this Abseil's IDivDuration writes the remainder unconditionally
    const absl::Duration late =
        now - w.last_heartbeat - options_.heartbeat_interval / 2;
    const int64_t missed = absl::IDivDuration(std::max(absl::ZeroDuration(), late),
                                              options_.heartbeat_interval, &rem);
    WorkerHealth health = WorkerHealth::kHealthy;
    if (missed >= options_.dead_after_missed) {
      health = WorkerHealth::kDead;
    } else if (missed >= options_.suspect_after_missed) {
      health = WorkerHealth::kSuspect;
    }
    if (health != w.health) {
      if (health == WorkerHealth::kDead) {
        LOG(WARNING) << "worker " << id << " is dead: " << missed << " heartbeats missed";
      } else {
        LOG(INFO) << "worker " << id << " " << WorkerHealthName(w.health) << " -> "
                  << WorkerHealthName(health) << " (" << missed << " heartbeats missed)";
      }
      w.health = health;
      changed.push_back(id);
    }
  }
  return changed;
}

std::vector<std::string> WorkerRegistry::UpdateHealth() {
  absl::MutexLock lock(&mu_);
  return UpdateHealthLocked();
}

std::vector<WorkerView> WorkerRegistry::Snapshot() {
  absl::MutexLock lock(&mu_);
  UpdateHealthLocked();
  std::vector<WorkerView> out;
  out.reserve(workers_.size());
  for (const auto& [id, w] : workers_) out.push_back(w);
  return out;
}

std::vector<WorkerView> WorkerRegistry::Placeable(WorkerRole role) {
  std::vector<WorkerView> out;
  for (WorkerView& w : Snapshot()) {
    if ((w.spec.role == role || w.spec.role == WorkerRole::kBoth) && w.Placeable()) {
      out.push_back(std::move(w));
    }
  }
  return out;
}

absl::StatusOr<WorkerView> WorkerRegistry::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  UpdateHealthLocked();
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker '", id, "'"));
  return it->second;
}

}  // namespace oscarkv::router
