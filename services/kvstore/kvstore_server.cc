#include "services/kvstore/kvstore_server.h"

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/metrics/metrics_http_server.h"
#include "lib/rpc/server_runner.h"
#include "lib/rpc/worker_registration.h"
#include "lib/rpc/worker_runtime.h"
#include "lib/transfer/backend_factory.h"
#include "services/kvstore/block_store.h"
#include "services/kvstore/kvstore_metrics.h"
#include "services/kvstore/kvstore_service.h"

namespace oscarkv::kvstore {
namespace {

absl::StatusOr<std::unique_ptr<transfer::TransferBackend>> MakeBackend(const KvStoreConfig& c) {
  return transfer::CreateBackend({.name = c.transfer_backend,
                                  .ucx_transports = c.ucx_transports,
                                  .ucx_peer_failure_detection = c.ucx_peer_failure_detection});
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvStoreServer>> KvStoreServer::Create(const KvStoreConfig& config,
                                                                     KvStoreServerDeps deps) {
  OSCARKV_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<KvStoreServer> s(new KvStoreServer(config));
  metrics::Registry* registry = deps.registry;
  if (registry == nullptr) {
    s->own_registry_ = std::make_unique<metrics::Registry>();
    registry = s->own_registry_.get();
  }
  s->metrics_ = std::make_unique<KvStoreMetrics>(*registry);

  if (deps.backend != nullptr) {
    s->backend_ = deps.backend;
  } else {
    absl::StatusOr<std::unique_ptr<transfer::TransferBackend>> backend = MakeBackend(config);
    if (!backend.ok()) return Annotate(backend.status(), "kvstore transfer backend");
    s->own_backend_ = *std::move(backend);
    s->backend_ = s->own_backend_.get();
  }
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<BlockPool> pool,
                           BlockPool::Create(config.capacity_bytes, s->backend_));
  BlockStoreOptions options;
  options.default_read_lease = absl::Seconds(config.read_lease_seconds);
  options.default_reservation = absl::Seconds(config.reservation_seconds);
  options.max_pin = absl::Seconds(config.max_pin_seconds);
  options.verify_on_commit = config.verify_on_commit;
  s->store_ = std::make_unique<BlockStore>(options, std::move(pool),
                                           std::make_unique<LruEvictionPolicy>(),
                                           deps.clock ? deps.clock : RealClock::Get(),
                                           s->metrics_.get());
  s->service_ = std::make_unique<KvStoreService>(
      s->store_.get(), PoolEndpoint{s->backend_->EndpointAddress(),
                                    s->backend_->capabilities().name,
                                    s->store_->registration().remote_descriptor,
                                    config.worker_id});

  // Gauges mirror Stats() at scrape time.
  s->collect_ = std::make_shared<CollectState>();
  s->collect_->server = s.get();
  registry->AddCollectCallback([state = s->collect_] {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->server == nullptr) return;
    KvStoreMetrics& m = *state->server->metrics_;
    const StoreStats st = state->server->store_->Stats();
    m.blocks_committed.Set(static_cast<double>(st.blocks));
    m.blocks_reserved.Set(static_cast<double>(st.reserved_blocks));
    m.pool_capacity_bytes.Set(static_cast<double>(st.capacity_bytes));
    m.pool_used_bytes.Set(static_cast<double>(st.used_bytes));
    m.bytes_saved_vs_bf16_bytes.Set(static_cast<double>(st.bytes_saved_vs_bf16));
    m.hit_ratio.Set(st.hit_rate);
    m.pinned_blocks.Set(static_cast<double>(st.pinned_blocks));
    m.read_leases.Set(static_cast<double>(st.active_read_leases));
    for (const StoreStats::Codec& c : st.by_codec) {
      m.stored_bytes_by_codec.WithLabels({std::to_string(static_cast<int>(c.codec))})
          .Set(static_cast<double>(c.stored_bytes));
    }
  });

  OSCARKV_ASSIGN_OR_RETURN(
      s->runner_, rpc::ServerRunner::Start({.listen_address = config.grpc_address},
                                           {s->service_.get()}));
  OSCARKV_ASSIGN_OR_RETURN(
      s->http_, rpc::StartMetricsEndpoint(registry, config.metrics_host, config.metrics_port,
                                          &s->ready_, "kvstore is draining"));
  s->sweep_ =
      std::make_unique<rpc::PeriodicThread>(absl::Seconds(config.sweep_interval_seconds),
                                            [server = s.get()] { server->store_->Sweep(); });
  s->ready_.store(true);
  {
    oscarkv::common::v1::WorkerInfo info;
    info.set_worker_id(config.worker_id);
    info.set_role(oscarkv::common::v1::WORKER_ROLE_KVSTORE);
    info.set_transfer_backend(s->backend_->capabilities().name);
    info.set_kv_capacity_bytes(config.capacity_bytes);
    // Held keys: the committed blocks, so the router's prefix index (holder "kvstore") learns
    // of evictions; the router also records what prefill publishes, for the time until the next
    // heartbeat.
    OSCARKV_ASSIGN_OR_RETURN(
        s->registration_,
        rpc::StartWorkerRegistration(
            config.router_address, config.advertise_address, s->grpc_dial_address(),
            std::move(info), [server = s.get()] {
              rpc::WorkerReport r;
              const StoreStats st = server->store_->Stats();
              r.load.set_kv_used_bytes(st.used_bytes);
              r.load.set_kv_capacity_bytes(st.capacity_bytes);
              r.held_keys = server->store_->CommittedKeys();
              return r;
            }));
  }
  LOG(INFO) << "kvstore " << config.worker_id << " serving gRPC on port " << s->grpc_port()
            << ", metrics on port " << s->metrics_port() << ", "
            << config.capacity_bytes << " pool bytes over " << s->backend_->capabilities().name;
  return s;
}

KvStoreServer::KvStoreServer(const KvStoreConfig& config) : config_(config) {}

KvStoreServer::~KvStoreServer() { Shutdown(); }

int KvStoreServer::grpc_port() const { return runner_ ? runner_->port() : -1; }
std::string KvStoreServer::grpc_dial_address() const {
  return runner_ ? runner_->dial_address() : "";
}
int KvStoreServer::metrics_port() const { return http_ ? http_->port() : -1; }

void KvStoreServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    ready_.store(false);
    // Leave the router first, so it places nothing new here while in-flight calls drain.
    if (registration_) registration_->Stop(/*deregister=*/true);
    if (runner_) {
      runner_->Shutdown(std::chrono::milliseconds(
          static_cast<int64_t>(config_.drain_seconds * 1000)));
      runner_->Wait();
    }
    if (sweep_) sweep_->Stop();
    if (http_) http_->Stop();
    if (collect_) {
      std::lock_guard<std::mutex> lock(collect_->mu);
      collect_->server = nullptr;
    }
    LOG(INFO) << "kvstore " << config_.worker_id << " stopped";
  });
}

}  // namespace oscarkv::kvstore
