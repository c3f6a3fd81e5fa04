// WorkerRegistration: the client side of oscarkv.router.v1.WorkerRegistryService, one class for
// all three workers (prefill, decode, kvstore).
//
// Start() returns at once; a background thread then
//   1. registers with the router, retrying with exponential backoff (initial_backoff doubling up
//      to max_backoff) until the router answers, so a worker serves before the router is up;
//   2. heartbeats every interval the router returned, with the load and held block keys the
//      `report` callback gives (see WorkerReport);
//   3. registers again when a heartbeat gets NOT_FOUND (unknown id, expired, or another epoch:
//      the router restarted), and keeps heartbeating through UNAVAILABLE (router briefly gone).
// Stop() (on drain) ends the thread and sends Deregister, so the router places nothing new here.
//
// Held keys: `report` returns the worker's whole current set; the client sends the first
// heartbeat after a registration (or after a failed heartbeat) as a full set
// (keys_are_delta = false) and the others as deltas (held_keys added, evicted_keys dropped), at
// most `max_keys_per_heartbeat` added keys per heartbeat (the rest follow in the next ones).
//
// Thread-safety: all public methods may be called from any thread. `report` runs on the
// background thread only, never under the client's lock.
#ifndef OSCARKV_LIB_RPC_WORKER_REGISTRATION_H_
#define OSCARKV_LIB_RPC_WORKER_REGISTRATION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/kvformat/int2_block.h"
#include "oscarkv/router/v1/router.grpc.pb.h"

namespace CLI {
class App;
}

namespace oscarkv::rpc {

// What a worker reports in each heartbeat.
struct WorkerReport {
  oscarkv::common::v1::WorkerLoad load;
  // Every block key the worker holds now (decode: KV of sequences/sessions it keeps; kvstore:
  // committed blocks; prefill: blocks it keeps locally). Empty when it holds none or does not
  // track them.
  std::vector<kvformat::BlockKey> held_keys;
};

struct WorkerRegistrationOptions {
  // Router's gRPC registry address "host:port"; required.
  std::string router_address;
  // Who this worker is: worker_id, role and grpc_address are required; the rest is optional.
  oscarkv::common::v1::WorkerInfo worker;
  // First retry delay after a failed Register. Default: 200 ms.
  absl::Duration initial_backoff = absl::Milliseconds(200);
  // Largest retry delay. Default: 5 s.
  absl::Duration max_backoff = absl::Seconds(5);
  // Deadline of each Register/Heartbeat/Deregister call. Default: 2 s.
  absl::Duration call_timeout = absl::Seconds(2);
  // Heartbeat interval used when the router returns none (<= 0). Default: 2 s.
  absl::Duration default_heartbeat_interval = absl::Seconds(2);
  // Added keys per heartbeat, >= 1. Default: 65536 (about 1.2 MB on the wire).
  size_t max_keys_per_heartbeat = 65536;
};

class WorkerRegistration {
 public:
  // Called on the background thread before each heartbeat; must be cheap and thread-safe with
  // respect to the worker's own threads. May be empty (load zero, no keys).
  using ReportFn = std::function<WorkerReport()>;

  //! Starts the background thread; does not wait for the router.
  //! @return kInvalidArgument for a missing router address, worker id, role or gRPC address.
  static absl::StatusOr<std::unique_ptr<WorkerRegistration>> Start(
      WorkerRegistrationOptions options, ReportFn report);

  ~WorkerRegistration();  // Stop(/*deregister=*/true)
  WorkerRegistration(const WorkerRegistration&) = delete;
  WorkerRegistration& operator=(const WorkerRegistration&) = delete;

  //! Ends the background thread; with `deregister`, tells the router (one call, call_timeout)
  //! when currently registered. Idempotent.
  void Stop(bool deregister = true);

  //! Whether the last Register/Heartbeat exchange left this worker registered.
  bool registered() const;
  //! Successful Register calls so far (> 1 after a router restart or expiry).
  int registrations() const;
  //! Successful heartbeats so far.
  int64_t heartbeats() const;
  //! True when the router's last heartbeat answer asked this worker to drain.
  bool drain_requested() const;
  //! Blocks until registered or `timeout` passes; @return registered().
  bool WaitUntilRegistered(absl::Duration timeout) const;
  //! Blocks until `n` heartbeats have succeeded or `timeout` passes; @return whether they did.
  bool WaitForHeartbeats(int64_t n, absl::Duration timeout) const;

 private:
  WorkerRegistration(WorkerRegistrationOptions options, ReportFn report);
  void Loop();
  // One Register call; on success sets epoch/interval and clears the sent key set.
  bool TryRegister();
  // One Heartbeat call. @return false when the worker must register again.
  bool TryHeartbeat();
  // Sleeps up to `d` or until Stop(); @return false when stopping.
  bool SleepFor(absl::Duration d);

  const WorkerRegistrationOptions options_;
  const ReportFn report_;
  std::unique_ptr<oscarkv::router::v1::WorkerRegistryService::Stub> stub_;

  struct KeyHash {  // keys are uniform hashes already
    size_t operator()(const kvformat::BlockKey& k) const {
      return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull));
    }
  };

  // Background-thread state (no lock: only Loop and its callees touch it).
  absl::flat_hash_set<kvformat::BlockKey, KeyHash> sent_keys_;  // what the router holds for us
  bool keys_in_sync_ = false;  // false → next heartbeat sends the full set

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_requested_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration interval_ ABSL_GUARDED_BY(mu_);
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
  absl::Mutex stop_mu_;  // serialises Stop()
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

// --- Helpers the three worker configs and servers share ---

// Adds --router_address and --advertise_address to `app`, bound to the two strings.
void AddRegistrationFlags(CLI::App& app, std::string& router_address,
                          std::string& advertise_address);

// kInvalidArgument unless router_address and advertise_address are empty or "host:port".
absl::Status ValidateRegistrationFlags(const std::string& router_address,
                                       const std::string& advertise_address);

// Starts registering a worker: `advertise_address` when set, else `dial_address` (the server's
// own loopback address) goes to the router as the worker's gRPC address. Returns null (no
// registration) when `router_address` is empty. @return Start()'s errors.
absl::StatusOr<std::unique_ptr<WorkerRegistration>> StartWorkerRegistration(
    const std::string& router_address, const std::string& advertise_address,
    const std::string& dial_address, oscarkv::common::v1::WorkerInfo worker,
    WorkerRegistration::ReportFn report);

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_WORKER_REGISTRATION_H_
