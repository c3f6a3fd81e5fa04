#include "services/prefill/prefill_server.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/metrics/metrics_http_server.h"
#include "lib/rpc/model_identity.h"
#include "lib/rpc/server_runner.h"
#include "lib/rpc/worker_registration.h"
#include "lib/rpc/worker_runtime.h"
#include "lib/rpc/worker_flags.h"
#include "lib/transfer/backend_factory.h"
#include "services/prefill/kv_publisher.h"
#include "services/prefill/kvstore_client.h"
#include "services/prefill/prefill_device.h"
#include "services/prefill/prefill_engine.h"
#include "services/prefill/prefill_metrics.h"
#include "services/prefill/prefill_service.h"
#ifdef OSCARKV_HAVE_MODEL_GPU
#include "services/prefill/gpu_prefill_device.h"
#endif

namespace oscarkv::prefill {
namespace {

absl::StatusOr<std::unique_ptr<transfer::TransferBackend>> MakeBackend(const PrefillConfig& c) {
  return transfer::CreateBackend({.name = c.transfer_backend,
                                  .ucx_transports = c.ucx_transports,
                                  .ucx_peer_failure_detection = c.ucx_peer_failure_detection});
}

absl::StatusOr<std::unique_ptr<PrefillDevice>> MakeDevice(const PrefillConfig& c,
                                                          const engine::ServingEngine* serving,
                                                          transfer::TransferBackend* backend) {
  OSCARKV_ASSIGN_OR_RETURN(const int ordinal, rpc::ParseDeviceFlag(c.device));
  if (ordinal < 0) return NewCpuPrefillDevice(serving);
#ifdef OSCARKV_HAVE_MODEL_GPU
  return NewGpuPrefillDevice(serving,
                             {.device = ordinal,
                              .one_pass = c.gpu_prefill == "one_pass",
                              .max_prompt_tokens = c.max_prompt_tokens,
                              .packed_handoff = c.gpu_direct_kv,
                              .outbox_bytes = c.outbox_capacity_bytes,
                              .outbox_ttl_seconds = c.outbox_ttl_seconds},
                             backend);
#else
  return absl::UnimplementedError(
      absl::StrCat("--device ", c.device, ": this build has no CUDA (rebuild where nvcc is found)"));
#endif
}

}  // namespace

#ifndef OSCARKV_SOURCE_DIR
#define OSCARKV_SOURCE_DIR ""
#endif

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Create(const PrefillConfig& config,
                                                                   PrefillServerDeps deps) {
  OSCARKV_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<PrefillServer> s(new PrefillServer(config));
  metrics::Registry* registry = deps.registry;
  if (registry == nullptr) {
    s->own_registry_ = std::make_unique<metrics::Registry>();
    registry = s->own_registry_.get();
  }
  s->metrics_ = std::make_unique<PrefillMetrics>(*registry);
  if (deps.backend != nullptr) {
    s->backend_ = deps.backend;
  } else {
    absl::StatusOr<std::unique_ptr<transfer::TransferBackend>> b = MakeBackend(config);
    if (!b.ok()) return Annotate(b.status(), "prefill transfer backend");
    s->own_backend_ = *std::move(b);
    s->backend_ = s->own_backend_.get();
  }
  const engine::ServingEngine* serving = deps.engine;
  if (serving == nullptr) {
    OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(config.model));
    model::ModelOptions mo;
    mo.threads = config.threads;
    OSCARKV_ASSIGN_OR_RETURN(s->own_model_, model::Model::Load(path, mo));
    OSCARKV_ASSIGN_OR_RETURN(s->own_serving_engine_,
                             engine::LoadWorkerServingEngine(s->own_model_.get(), config.codec,
                                                             config.calibration,
                                                             config.chunk_tokens,
                                                             OSCARKV_SOURCE_DIR));
    serving = s->own_serving_engine_.get();
  }
  if (!config.kvstore_address.empty()) {
    s->store_ = KvStoreClient::Create(
        config.kvstore_address,
        std::chrono::milliseconds(static_cast<int64_t>(config.kvstore_timeout_seconds * 1000)));
  }
  s->publisher_ = std::make_unique<KvPublisher>(
      s->backend_, s->store_.get(), config.worker_id, absl::Seconds(config.outbox_ttl_seconds),
      static_cast<uint64_t>(config.outbox_capacity_bytes));
  absl::StatusOr<std::unique_ptr<PrefillDevice>> device =
      MakeDevice(config, serving, s->backend_);
  if (!device.ok()) return Annotate(device.status(), "prefill device");
  s->device_ = *std::move(device);
  if (s->store_ != nullptr && !s->device_->shares_kvstore()) {
    LOG(WARNING) << "one-pass prefill on " << s->device_->name()
                 << " neither reuses nor stores kvstore blocks (its KV is not reproducible "
                    "chunk by chunk); --kvstore_address is unused";
  }
  s->engine_ = std::make_unique<PrefillEngine>(
      serving, s->device_.get(), s->backend_, s->store_.get(), s->publisher_.get(), s->metrics_.get(),
      PrefillEngineOptions{config.worker_id, config.max_concurrent});
  s->service_ = std::make_unique<PrefillService>(s->engine_.get());

  s->collect_ = std::make_shared<CollectState>();
  s->collect_->server = s.get();
  registry->AddCollectCallback([state = s->collect_] {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->server == nullptr) return;
    PrefillMetrics& m = *state->server->metrics_;
    m.outbox_bytes.Set(static_cast<double>(state->server->publisher_->outbox_bytes()));
    m.active_requests.Set(state->server->engine_->active());
  });

  OSCARKV_ASSIGN_OR_RETURN(s->runner_, rpc::ServerRunner::Start(
                                           {.listen_address = config.grpc_address},
                                           {s->service_.get()}));
  OSCARKV_ASSIGN_OR_RETURN(
      s->http_, rpc::StartMetricsEndpoint(registry, config.metrics_host, config.metrics_port,
                                          &s->ready_, "draining"));
  s->sweep_ = std::make_unique<rpc::PeriodicThread>(absl::Seconds(1), [server = s.get()] {
    const int dropped = server->publisher_->Sweep() + server->device_->Sweep();
    if (dropped > 0) VLOG(1) << "prefill: dropped " << dropped << " expired outbox entries";
  });
  s->ready_.store(true);
  {
    oscarkv::common::v1::WorkerInfo info;
    info.set_worker_id(config.worker_id);
    info.set_role(oscarkv::common::v1::WORKER_ROLE_PREFILL);
    info.set_transfer_backend(s->backend_->capabilities().name);
    info.set_packed_kv_direct(s->device_->offers_packed_kv());
    info.set_kv_numerics(s->device_->kv_numerics());
    info.set_bypasses_kvstore(s->store_ == nullptr || !s->device_->shares_kvstore());
    rpc::FillModelIdentity(*serving, info.mutable_model());
    // Held keys: none. The outbox only stages a request's blocks for its decode worker; reuse
    // across requests goes through the kvstore.
    OSCARKV_ASSIGN_OR_RETURN(
        s->registration_,
        rpc::StartWorkerRegistration(
            config.router_address, config.advertise_address, s->grpc_dial_address(),
            std::move(info), [server = s.get()] {
              rpc::WorkerReport r;
              r.load.set_active_requests(static_cast<uint32_t>(server->engine_->active()));
              r.load.set_kv_used_bytes(static_cast<uint64_t>(server->publisher_->outbox_bytes()));
              r.load.set_kv_capacity_bytes(static_cast<uint64_t>(server->config_.outbox_capacity_bytes));
              return r;
            }));
  }
  LOG(INFO) << "prefill " << config.worker_id << " serving gRPC on port " << s->grpc_port()
            << ", metrics on port " << s->metrics_port() << ", codec " << serving->codec().name
            << ", kvstore " << (config.kvstore_address.empty() ? "none" : config.kvstore_address)
            << ", transfer " << s->backend_->capabilities().name
            << (s->device_->offers_packed_kv() ? " (packed KV GPU to GPU)" : "");
  return s;
}

PrefillServer::PrefillServer(const PrefillConfig& config) : config_(config) {}

PrefillServer::~PrefillServer() {
  Shutdown();
  // The transfer backend's progress thread may still be serving a late pull from the outbox:
  // stop what uses them, deregister the outboxes (their memory stays), let the backend go,
  // and only then free the memory (the members left).
  sweep_.reset();
  http_.reset();
  registration_.reset();
  runner_.reset();
  service_.reset();
  engine_.reset();
  if (publisher_) publisher_->Close();
  device_.reset();
  store_.reset();
  own_backend_.reset();
}

int PrefillServer::grpc_port() const { return runner_ ? runner_->port() : -1; }
std::string PrefillServer::grpc_dial_address() const {
  return runner_ ? runner_->dial_address() : "";
}
int PrefillServer::metrics_port() const { return http_ ? http_->port() : -1; }

void PrefillServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    ready_.store(false);
    // Leave the router first, so it places nothing new here while in-flight calls drain.
    if (registration_) registration_->Stop(/*deregister=*/true);
    if (service_) service_->SetDraining();
    if (runner_) {
      runner_->Shutdown(
          std::chrono::milliseconds(static_cast<int64_t>(config_.drain_seconds * 1000)));
      runner_->Wait();
    }
    // A decode worker pulls a prefill's KV from the outbox after the Prefill call has returned:
    // the last ones get up to min(5 s, drain_seconds) before the outbox goes.
    if (engine_) {
      const absl::Time until =
          engine_->last_completed() +
          std::min(absl::Seconds(5), absl::Seconds(config_.drain_seconds));
      while (absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
    }
    if (sweep_) sweep_->Stop();
    if (http_) http_->Stop();
    if (collect_) {
      std::lock_guard<std::mutex> lock(collect_->mu);
      collect_->server = nullptr;
    }
    LOG(INFO) << "prefill " << config_.worker_id << " stopped";
  });
}

}  // namespace oscarkv::prefill
