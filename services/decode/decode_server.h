// Owns and wires one decode worker: model + ServingEngine (or borrowed ones), the DecodeDevice
// (CPU, or a GPU with --device cuda:N), transfer backend
// (or a borrowed one), DecodeEngine, the gRPC service and server, the metrics HTTP server
// (/metrics /healthz /readyz) and a sweep thread for expired sequences. Create starts serving;
// Shutdown drains (not ready → refuse new sequences → gRPC drain with deadline → stop).
#ifndef OSCARKV_SERVICES_DECODE_DECODE_SERVER_H_
#define OSCARKV_SERVICES_DECODE_DECODE_SERVER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "lib/engine/serving_engine.h"
#include "lib/metrics/metrics.h"
#include "lib/metrics/windowed_rate.h"
#include "lib/model/model.h"
#include "lib/transfer/transfer_backend.h"
#include "services/decode/decode_config.h"

namespace oscarkv::rpc {
class ServerRunner;
class PeriodicThread;
class WorkerRegistration;
}
namespace oscarkv::metrics {
class MetricsHttpServer;
}

namespace oscarkv::decode {

class DecodeDevice;
class DecodeEngine;
class DecodeService;
struct DecodeMetrics;

// What `oscarkv serve` shares between its in-process servers; all optional (null = own one).
struct DecodeServerDeps {
  transfer::TransferBackend* backend = nullptr;     // not owned; must outlive the server
  metrics::Registry* registry = nullptr;            // not owned; must outlive the server
  const engine::ServingEngine* engine = nullptr;    // not owned; replaces model/codec flags
};

// engine::LoadWorkerServingEngine with this build's source tree as the fallback location of the
// default calibration files (so `oscarkv serve` and the tests find them from any directory).
absl::StatusOr<std::unique_ptr<engine::ServingEngine>> LoadServingEngine(
    const model::Model* model, const std::string& codec, const std::string& calibration,
    int chunk_tokens);
// The calibration path LoadServingEngine uses for `calibration` and `codec` (empty → the codec's
// default file if present).
std::string ResolveCalibrationPath(const std::string& calibration,
                                   const std::string& codec = "oscar");

// Thread-safe: Shutdown may be called from any thread, more than once.
class DecodeServer {
 public:
  // Validates `config`, loads what is not borrowed, starts serving.
  static absl::StatusOr<std::unique_ptr<DecodeServer>> Create(const DecodeConfig& config,
                                                              DecodeServerDeps deps = {});
  ~DecodeServer();  // Shutdown()

  int grpc_port() const;
  std::string grpc_dial_address() const;  // "127.0.0.1:port"
  int metrics_port() const;               // -1 when off
  DecodeEngine& engine() { return *engine_; }
  transfer::TransferBackend& backend() { return *backend_; }

  void Shutdown();

 private:
  explicit DecodeServer(const DecodeConfig& config);

  const DecodeConfig config_;
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<DecodeMetrics> metrics_;
  std::unique_ptr<transfer::TransferBackend> own_backend_;
  transfer::TransferBackend* backend_ = nullptr;
  std::unique_ptr<model::Model> own_model_;
  std::unique_ptr<engine::ServingEngine> own_serving_engine_;
  std::unique_ptr<DecodeDevice> device_;  // declared before engine_: outlives its sequences
  std::unique_ptr<DecodeEngine> engine_;
  std::unique_ptr<DecodeService> service_;
  std::unique_ptr<rpc::ServerRunner> runner_;
  std::unique_ptr<rpc::WorkerRegistration> registration_;  // null without --router_address
  std::unique_ptr<metrics::MetricsHttpServer> http_;
  struct CollectState {
    std::mutex mu;
    DecodeServer* server = nullptr;  // guarded by mu; null after shutdown
  };
  // Generated tokens per second over the last 10 s, sampled by the sweep every second.
  metrics::WindowedRate token_rate_{absl::Seconds(10)};
  std::shared_ptr<CollectState> collect_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<rpc::PeriodicThread> sweep_;  // null until started
  std::once_flag shutdown_once_;
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_DECODE_SERVER_H_
