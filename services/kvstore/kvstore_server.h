// Owns and wires one kvstore: transfer backend (or a borrowed one), host pool, BlockStore, the
// gRPC service and server, the metrics HTTP server (/metrics /healthz /readyz), and the expiry
// sweep thread. Start is Create; Shutdown drains (not ready → gRPC drain with deadline → stop).
#ifndef OSCARKV_SERVICES_KVSTORE_KVSTORE_SERVER_H_
#define OSCARKV_SERVICES_KVSTORE_KVSTORE_SERVER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "lib/metrics/metrics.h"
#include "lib/transfer/transfer_backend.h"
#include "services/kvstore/clock.h"
#include "services/kvstore/kvstore_config.h"

namespace oscarkv::rpc {
class ServerRunner;
class PeriodicThread;
class WorkerRegistration;
}
namespace oscarkv::metrics {
class MetricsHttpServer;
}

namespace oscarkv::kvstore {

class BlockStore;
class KvStoreService;
struct KvStoreMetrics;

// Things `oscarkv serve` shares between its in-process servers; all optional (null = own one).
struct KvStoreServerDeps {
  transfer::TransferBackend* backend = nullptr;  // not owned; must outlive the server
  metrics::Registry* registry = nullptr;         // not owned; must outlive the server
  const Clock* clock = nullptr;                  // not owned; Default: RealClock
};

// Thread-safe: Shutdown may be called from any thread, more than once.
class KvStoreServer {
 public:
  // Validates `config`, builds everything, and starts serving.
  // @return the config's kInvalidArgument, or the first failure of the transfer backend, pool,
  //         gRPC bind (kUnavailable) or metrics server.
  static absl::StatusOr<std::unique_ptr<KvStoreServer>> Create(const KvStoreConfig& config,
                                                               KvStoreServerDeps deps = {});
  ~KvStoreServer();  // Shutdown()

  int grpc_port() const;
  // "127.0.0.1:port" for a client on this machine.
  std::string grpc_dial_address() const;
  // -1 when the metrics server is off.
  int metrics_port() const;
  BlockStore& store() { return *store_; }
  transfer::TransferBackend& backend() { return *backend_; }

  // Stops being ready, drains gRPC for config.drain_seconds, stops the sweep and HTTP servers.
  void Shutdown();

 private:
  explicit KvStoreServer(const KvStoreConfig& config);

  const KvStoreConfig config_;
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<KvStoreMetrics> metrics_;
  std::unique_ptr<transfer::TransferBackend> own_backend_;
  transfer::TransferBackend* backend_ = nullptr;
  std::unique_ptr<BlockStore> store_;
  std::unique_ptr<KvStoreService> service_;
  std::unique_ptr<rpc::ServerRunner> runner_;
  std::unique_ptr<rpc::WorkerRegistration> registration_;  // null without --router_address
  std::unique_ptr<metrics::MetricsHttpServer> http_;
  // Lets the registry's collect callback outlive this server safely (the registry may be shared).
  struct CollectState {
    std::mutex mu;
    KvStoreServer* server = nullptr;  // guarded by mu; null after shutdown
  };
  std::shared_ptr<CollectState> collect_;

  std::atomic<bool> ready_{false};
  std::unique_ptr<rpc::PeriodicThread> sweep_;  // null until started
  std::once_flag shutdown_once_;
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_KVSTORE_SERVER_H_
