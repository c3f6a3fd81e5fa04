// What each worker server (prefill, decode, kvstore) runs beside its gRPC server: the
// /metrics /healthz /readyz endpoint, whose readiness follows the server's ready flag, and a
// thread that runs a sweep (expired sequences, outbox entries, leases) every period.
#ifndef OSCARKV_LIB_RPC_WORKER_RUNTIME_H_
#define OSCARKV_LIB_RPC_WORKER_RUNTIME_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/metrics/metrics.h"
#include "lib/metrics/metrics_http_server.h"

namespace oscarkv::rpc {

// Serves `registry` (not owned; must outlive the endpoint) on host:port (0 = any free port);
// /readyz answers 503 with `not_ready_message` while `*ready` (not owned, not null; must outlive
// the endpoint) is false. @return null when port < 0 (the endpoint is off), else
// MetricsHttpServer::Start's errors.
absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> StartMetricsEndpoint(
    const metrics::Registry* registry, const std::string& host, int port,
    const std::atomic<bool>* ready, std::string not_ready_message);

// Runs `task` every `period` on its own thread, the first time one period after construction,
// until Stop(). Thread-safe; Stop may be called from any thread but `task`'s.
class PeriodicThread {
 public:
  PeriodicThread(absl::Duration period, std::function<void()> task);
  ~PeriodicThread();  // Stop()
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Wakes the thread at once, lets a running `task` finish, joins. Idempotent.
  void Stop();

 private:
  void Loop(absl::Duration period, const std::function<void()>& task);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::once_flag join_once_;
  std::thread thread_;
};

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_WORKER_RUNTIME_H_
