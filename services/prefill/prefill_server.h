// Owns and wires one prefill worker: model + ServingEngine (or borrowed ones), transfer backend
// (or a borrowed one), kvstore client, KvPublisher (outbox), PrefillEngine, the gRPC service and
// server, the metrics HTTP server (/metrics /healthz /readyz) and a sweep thread for expired
// outbox entries. Create starts serving; Shutdown drains (not ready → refuse new prefills →
// gRPC drain with deadline → stop).
#ifndef OSCARKV_SERVICES_PREFILL_PREFILL_SERVER_H_
#define OSCARKV_SERVICES_PREFILL_PREFILL_SERVER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "lib/metrics/metrics.h"
#include "lib/model/model.h"
#include "lib/transfer/transfer_backend.h"
#include "services/prefill/prefill_config.h"

namespace oscarkv::rpc {
class ServerRunner;
class PeriodicThread;
class WorkerRegistration;
}
namespace oscarkv::metrics {
class MetricsHttpServer;
}

namespace oscarkv::prefill {

class PrefillDevice;
class PrefillEngine;
class KvPublisher;
class KvStoreClient;
class PrefillService;
struct PrefillMetrics;

// What `oscarkv serve` shares between its in-process servers; all optional (null = own one).
struct PrefillServerDeps {
  transfer::TransferBackend* backend = nullptr;     // not owned; must outlive the server
  metrics::Registry* registry = nullptr;            // not owned; must outlive the server
  const engine::ServingEngine* engine = nullptr;    // not owned; replaces model/codec flags
};


// Thread-safe: Shutdown may be called from any thread, more than once.
class PrefillServer {
 public:
  // Validates `config`, loads what is not borrowed, starts serving.
  static absl::StatusOr<std::unique_ptr<PrefillServer>> Create(const PrefillConfig& config,
                                                              PrefillServerDeps deps = {});
  ~PrefillServer();  // Shutdown()

  int grpc_port() const;
  std::string grpc_dial_address() const;  // "127.0.0.1:port"
  int metrics_port() const;               // -1 when off
  PrefillEngine& engine() { return *engine_; }
  transfer::TransferBackend& backend() { return *backend_; }

  void Shutdown();

 private:
  explicit PrefillServer(const PrefillConfig& config);

  const PrefillConfig config_;
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<PrefillMetrics> metrics_;
  std::unique_ptr<transfer::TransferBackend> own_backend_;
  transfer::TransferBackend* backend_ = nullptr;
  std::unique_ptr<model::Model> own_model_;
  std::unique_ptr<engine::ServingEngine> own_serving_engine_;
  std::unique_ptr<PrefillDevice> device_;
  std::unique_ptr<KvStoreClient> store_;
  std::unique_ptr<KvPublisher> publisher_;
  std::unique_ptr<PrefillEngine> engine_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<rpc::ServerRunner> runner_;
  std::unique_ptr<rpc::WorkerRegistration> registration_;  // null without --router_address
  std::unique_ptr<metrics::MetricsHttpServer> http_;
  struct CollectState {
    std::mutex mu;
    PrefillServer* server = nullptr;  // guarded by mu; null after shutdown
  };
  std::shared_ptr<CollectState> collect_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<rpc::PeriodicThread> sweep_;  // null until started
  std::once_flag shutdown_once_;
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_PREFILL_SERVER_H_
