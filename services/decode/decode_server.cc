#include "services/decode/decode_server.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/metrics/metrics_http_server.h"
#include "lib/rpc/model_identity.h"
#include "lib/rpc/server_runner.h"
#include "lib/rpc/worker_flags.h"
#include "lib/rpc/worker_registration.h"
#include "lib/rpc/worker_runtime.h"
#include "lib/transfer/backend_factory.h"
#include "services/decode/decode_device.h"
#include "services/decode/decode_engine.h"
#include "services/decode/decode_metrics.h"
#include "services/decode/decode_service.h"
#ifdef OSCARKV_HAVE_MODEL_GPU
#include "services/decode/gpu_decode_device.h"
#endif

namespace oscarkv::decode {
namespace {

absl::StatusOr<std::unique_ptr<transfer::TransferBackend>> MakeBackend(const DecodeConfig& c) {
  return transfer::CreateBackend({.name = c.transfer_backend,
                                  .ucx_transports = c.ucx_transports,
                                  .ucx_peer_failure_detection = c.ucx_peer_failure_detection});
}

absl::StatusOr<std::unique_ptr<DecodeDevice>> MakeDevice(const DecodeConfig& c,
                                                         const engine::ServingEngine* serving,
                                                         transfer::TransferBackend* backend) {
  OSCARKV_ASSIGN_OR_RETURN(const int ordinal, rpc::ParseDeviceFlag(c.device));
  if (ordinal < 0) return NewCpuDecodeDevice(serving);
#ifdef OSCARKV_HAVE_MODEL_GPU
  return NewGpuDecodeDevice(serving,
                            {.device = ordinal,
                             .max_batch = c.max_batch,
                             .kv_budget_bytes = c.kv_capacity_bytes,
                             .packed_handoff = c.gpu_direct_kv},
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

std::string ResolveCalibrationPath(const std::string& calibration, const std::string& codec) {
  return engine::ResolveWorkerCalibrationPath(calibration, codec, OSCARKV_SOURCE_DIR);
}

absl::StatusOr<std::unique_ptr<engine::ServingEngine>> LoadServingEngine(
    const model::Model* model, const std::string& codec, const std::string& calibration,
    int chunk_tokens) {
  return engine::LoadWorkerServingEngine(model, codec, calibration, chunk_tokens,
                                         OSCARKV_SOURCE_DIR);
}

absl::StatusOr<std::unique_ptr<DecodeServer>> DecodeServer::Create(const DecodeConfig& config,
                                                                   DecodeServerDeps deps) {
  OSCARKV_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<DecodeServer> s(new DecodeServer(config));
  metrics::Registry* registry = deps.registry;
  if (registry == nullptr) {
    s->own_registry_ = std::make_unique<metrics::Registry>();
    registry = s->own_registry_.get();
  }
  s->metrics_ = std::make_unique<DecodeMetrics>(*registry);
  if (deps.backend != nullptr) {
    s->backend_ = deps.backend;
  } else {
    absl::StatusOr<std::unique_ptr<transfer::TransferBackend>> b = MakeBackend(config);
    if (!b.ok()) return Annotate(b.status(), "decode transfer backend");
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
                             LoadServingEngine(s->own_model_.get(), config.codec,
                                               config.calibration, config.chunk_tokens));
    serving = s->own_serving_engine_.get();
  }
  absl::StatusOr<std::unique_ptr<DecodeDevice>> device = MakeDevice(config, serving, s->backend_);
  if (!device.ok()) return Annotate(device.status(), "decode device");
  s->device_ = *std::move(device);
  DecodeEngineOptions eo;
  eo.max_batch = config.max_batch;
  eo.kv_capacity_bytes = config.kv_capacity_bytes;
  eo.idle_ttl_seconds = config.idle_ttl_seconds;
  eo.receive_ttl_seconds = config.receive_ttl_seconds;
  eo.max_keep_seconds = config.max_keep_seconds;
  eo.default_max_new_tokens = config.default_max_new_tokens;
  s->engine_ = std::make_unique<DecodeEngine>(serving, s->device_.get(), s->backend_,
                                              s->metrics_.get(), eo);
  s->service_ = std::make_unique<DecodeService>(s->engine_.get());

  s->collect_ = std::make_shared<CollectState>();
  s->collect_->server = s.get();
  registry->AddCollectCallback([state = s->collect_] {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->server == nullptr) return;
    DecodeMetrics& m = *state->server->metrics_;
    DecodeEngine& e = *state->server->engine_;
    const PoolUsage u = e.Usage();
    m.pooled_sequences.Set(static_cast<double>(u.sequences));
    m.kv_bytes.Set(static_cast<double>(u.kv_bytes));
    m.kv_bf16_equivalent_bytes.Set(static_cast<double>(u.bf16_equivalent_bytes));
    m.kv_reserved_bytes.Set(static_cast<double>(u.reserved_bytes));
    m.kv_capacity_bytes.Set(static_cast<double>(u.capacity_bytes));
    m.active_sequences.Set(e.Load());
    m.tokens_per_second.Set(state->server->token_rate_.PerSecond());
  });

  OSCARKV_ASSIGN_OR_RETURN(s->runner_, rpc::ServerRunner::Start(
                                           {.listen_address = config.grpc_address},
                                           {s->service_.get()}));
  OSCARKV_ASSIGN_OR_RETURN(
      s->http_, rpc::StartMetricsEndpoint(registry, config.metrics_host, config.metrics_port,
                                          &s->ready_, "draining"));
  s->sweep_ = std::make_unique<rpc::PeriodicThread>(absl::Seconds(1), [server = s.get()] {
    server->token_rate_.Sample(server->engine_->batcher_stats().tokens, absl::Now());
    const int dropped = server->engine_->Sweep();
    if (dropped > 0) VLOG(1) << "decode: dropped " << dropped << " expired sequences";
  });
  s->ready_.store(true);
  {
    oscarkv::common::v1::WorkerInfo info;
    info.set_worker_id(config.worker_id);
    info.set_role(oscarkv::common::v1::WORKER_ROLE_DECODE);
    info.set_transfer_backend(s->backend_->capabilities().name);
    info.set_packed_kv_direct(s->device_->takes_packed_kv());
    info.set_kv_capacity_bytes(static_cast<uint64_t>(config.kv_capacity_bytes));
    rpc::FillModelIdentity(*serving, info.mutable_model());
    // Held keys: none yet. Sequences are released at the end of each turn (the router never
    // sends EndTurn(keep)), and the pool does not record block keys.
    OSCARKV_ASSIGN_OR_RETURN(
        s->registration_,
        rpc::StartWorkerRegistration(
            config.router_address, config.advertise_address, s->grpc_dial_address(),
            std::move(info), [server = s.get()] {
              rpc::WorkerReport r;
              const PoolUsage u = server->engine_->Usage();
              r.load.set_active_requests(static_cast<uint32_t>(server->engine_->Load()));
              r.load.set_kv_used_bytes(static_cast<uint64_t>(u.kv_bytes));
              r.load.set_kv_capacity_bytes(static_cast<uint64_t>(u.capacity_bytes));
              return r;
            }));
  }
  LOG(INFO) << "decode " << config.worker_id << " serving gRPC on port " << s->grpc_port()
            << ", metrics on port " << s->metrics_port() << ", codec " << serving->codec().name
            << ", device " << s->device_->name() << ", max batch " << config.max_batch
            << ", transfer " << s->backend_->capabilities().name
            << (s->device_->takes_packed_kv() ? " (packed KV GPU to GPU)" : "");
  return s;
}

DecodeServer::DecodeServer(const DecodeConfig& config) : config_(config) {}

DecodeServer::~DecodeServer() { Shutdown(); }

int DecodeServer::grpc_port() const { return runner_ ? runner_->port() : -1; }
std::string DecodeServer::grpc_dial_address() const {
  return runner_ ? runner_->dial_address() : "";
}
int DecodeServer::metrics_port() const { return http_ ? http_->port() : -1; }

void DecodeServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    ready_.store(false);
    // Leave the router first, so it places nothing new here while in-flight calls drain.
    if (registration_) registration_->Stop(/*deregister=*/true);
    if (service_) service_->SetDraining();
    // Generations running or queued get up to --drain_seconds to end (gRPC keeps taking calls
    // meanwhile: a Generate for a sequence already started, EndTurn). What is still generating
    // then fails with kUnavailable and says why, so that the router resumes it on another
    // worker; before, the gRPC shutdown cut it off as "Cancelling all calls".
    if (engine_) {
      const absl::Time until = absl::Now() + absl::Seconds(config_.drain_seconds);
      while (engine_->Load() > 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
      const int unfinished = engine_->Load();
      if (unfinished > 0) {
        LOG(WARNING) << "decode " << config_.worker_id << ": " << unfinished
                     << " generations still running after the " << config_.drain_seconds
                     << " s drain end with UNAVAILABLE";
      }
      engine_->Stop(absl::UnavailableError(
          absl::StrCat("decode worker ", config_.worker_id, " shut down (drain of ",
                       config_.drain_seconds, " s over) before this generation ended")));
    }
    if (runner_) {
      // The streams just ended write their status; EndTurn calls finish.
      runner_->Shutdown(std::chrono::seconds(2));
      runner_->Wait();
    }
    if (sweep_) sweep_->Stop();
    if (http_) http_->Stop();
    if (collect_) {
      std::lock_guard<std::mutex> lock(collect_->mu);
      collect_->server = nullptr;
    }
    LOG(INFO) << "decode " << config_.worker_id << " stopped";
  });
}

}  // namespace oscarkv::decode
