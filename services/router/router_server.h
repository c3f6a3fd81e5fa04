// RouterServer: owns and wires the router's parts: the HTTP server (OpenAI API, health, metrics),
// the worker registry and prefix index, the placement policy, the request tracker and metrics.
// Lifecycle: Create() starts serving; Drain() (on SIGTERM) makes /readyz fail and new requests
// get 503, waits for in-flight requests up to drain_timeout_s, then stops; Wait() blocks until
// stopped.
//
// Threads: one HTTP listener thread plus one thread per open HTTP connection, started on demand
// up to `http_threads` (connection_threads.h);
// one thread per running completion (router_http_service.h); gRPC's pool for the worker
// registry (router_service.h). Thread-safe.
#ifndef OSCARKV_SERVICES_ROUTER_ROUTER_SERVER_H_
#define OSCARKV_SERVICES_ROUTER_ROUTER_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "services/router/completion_backend.h"
#include "services/router/placement_policy.h"
#include "services/router/prefix_index.h"
#include "services/router/request_tracker.h"
#include "services/router/router_config.h"
#include "services/router/worker_registry.h"

namespace httplib {
class Server;
}
namespace oscarkv::metrics {
class Registry;
}
namespace oscarkv::rpc {
class ServerRunner;
}

namespace oscarkv::router {

class RouterHttpService;
class RouterMetrics;
class RouterService;

class RouterServer {
 public:
  // Builds the completion backend once the server's worker registry, prefix index and placement
  // policy exist (a backend that places requests over registered workers needs them). Runs
  // inside Create, before any listener starts; the server outlives the backend's use of it.
  using BackendFactory =
      std::function<absl::StatusOr<std::shared_ptr<CompletionBackend>>(RouterServer& server)>;

  //! Builds everything and starts listening. `backend` may be null: then the config decides
  //! (the echo backend under --testing_echo_backend; otherwise the gRPC worker backend).
  //! `metrics_registry` may be null (the server makes its own); `oscarkv serve` passes the
  //! process-wide one. @return kInvalidArgument for a bad config, kUnavailable when the HTTP
  //! port cannot be bound, kFailedPrecondition when no backend can be built.
  static absl::StatusOr<std::unique_ptr<RouterServer>> Create(
      const RouterConfig& config, std::shared_ptr<CompletionBackend> backend = nullptr,
      metrics::Registry* metrics_registry = nullptr);
  //! As Create, with the backend built by `factory` (not null) from this server's registry,
  //! prefix index and policy. @return Create's errors, and the factory's.
  static absl::StatusOr<std::unique_ptr<RouterServer>> CreateWithBackendFactory(
      const RouterConfig& config, const BackendFactory& factory,
      metrics::Registry* metrics_registry = nullptr);
  ~RouterServer();  // Drain with a zero timeout if still running.
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  int http_port() const { return http_port_; }
  //! The worker registry's gRPC port; 0 when config.grpc_address is empty.
  int grpc_port() const;
  //! "127.0.0.1:<port>" (or the configured host) for clients on this machine.
  std::string http_address() const;

  //! Stops admitting, waits up to config.drain_timeout_s for in-flight requests, then stops the
  //! HTTP server. Idempotent; safe from any thread.
  void Drain();
  //! Blocks until the server has stopped.
  void Wait();

  WorkerRegistry& workers() { return *workers_; }
  PrefixIndex& prefix_index() { return *prefix_index_; }
  RequestTracker& tracker() { return *tracker_; }
  const PlacementPolicy& placement() const { return *placement_; }
  RouterMetrics& metrics() { return *metrics_; }

 private:
  RouterServer() = default;
  static absl::StatusOr<std::unique_ptr<RouterServer>> CreateImpl(
      const RouterConfig& config, std::shared_ptr<CompletionBackend> backend,
      const BackendFactory* factory, metrics::Registry* metrics_registry);

  RouterConfig config_;
  std::unique_ptr<metrics::Registry> owned_registry_;
  metrics::Registry* registry_ = nullptr;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<WorkerRegistry> workers_;
  std::unique_ptr<PrefixIndex> prefix_index_;
  std::unique_ptr<PlacementPolicy> placement_;
  std::unique_ptr<RequestTracker> tracker_;
  std::shared_ptr<CompletionBackend> backend_;
  std::unique_ptr<RouterHttpService> http_service_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  std::unique_ptr<RouterService> grpc_service_;
  std::unique_ptr<rpc::ServerRunner> grpc_server_;
  int http_port_ = 0;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_ROUTER_SERVER_H_
