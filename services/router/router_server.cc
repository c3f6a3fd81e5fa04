#include "services/router/router_server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "lib/metrics/connection_threads.h"
#include "lib/metrics/http_listen.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/metrics/metrics.h"
#include "lib/rpc/server_runner.h"
#include "services/router/router_http_service.h"
#include "services/router/router_metrics.h"
#include "services/router/router_service.h"
#include "services/router/testing_echo_backend.h"

namespace oscarkv::router {
namespace {

// Connection threads kept while idle, and how long the others outlive their last connection.
constexpr int kIdleConnectionThreads = 8;
constexpr absl::Duration kConnectionThreadIdleExit = absl::Seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Create(
    const RouterConfig& config, std::shared_ptr<CompletionBackend> backend,
    metrics::Registry* metrics_registry) {
  return CreateImpl(config, std::move(backend), nullptr, metrics_registry);
}

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::CreateWithBackendFactory(
    const RouterConfig& config, const BackendFactory& factory,
    metrics::Registry* metrics_registry) {
  if (!factory) return absl::InvalidArgumentError("router backend factory is empty");
  return CreateImpl(config, nullptr, &factory, metrics_registry);
}

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::CreateImpl(
    const RouterConfig& config, std::shared_ptr<CompletionBackend> backend,
    const BackendFactory* factory, metrics::Registry* metrics_registry) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  SetVerbosity(config.verbosity);
  std::unique_ptr<RouterServer> server(new RouterServer());
  RouterServer& r = *server;
  r.config_ = config;
  if (metrics_registry == nullptr) {
    r.owned_registry_ = std::make_unique<metrics::Registry>();
    metrics_registry = r.owned_registry_.get();
  }
  r.registry_ = metrics_registry;
  r.metrics_ = std::make_unique<RouterMetrics>(*r.registry_);

  WorkerRegistryOptions wopts;
  wopts.heartbeat_interval = absl::Seconds(config.heartbeat_interval_s);
  wopts.suspect_after_missed = config.suspect_after_missed;
  wopts.dead_after_missed = config.dead_after_missed;
  r.workers_ = std::make_unique<WorkerRegistry>(wopts);
  r.metrics_->WatchWorkers(*r.registry_, r.workers_.get());
  r.prefix_index_ = std::make_unique<PrefixIndex>(config.max_index_keys_per_worker);
  CostPlacementOptions popts;
  popts.overlap_weight = config.overlap_weight;
  popts.shared_credit = config.shared_credit;
  popts.active_request_weight = config.active_request_weight;
  popts.block_tokens = config.block_tokens;
  r.placement_ = std::make_unique<CostPlacementPolicy>(popts);
  r.tracker_ = std::make_unique<RequestTracker>();

  if (factory != nullptr) {
    absl::StatusOr<std::shared_ptr<CompletionBackend>> made = (*factory)(r);
    if (!made.ok()) return Annotate(made.status(), "router completion backend");
    backend = *std::move(made);
  }
  if (backend == nullptr && config.testing_echo_backend) {
    LOG(WARNING) << "router is serving from the TESTING echo backend (--testing_echo_backend): "
                    "no model, no workers";
    backend = std::make_shared<EchoCompletionBackend>();
  }
  if (backend == nullptr) {
    return absl::FailedPreconditionError(
        "no completion backend: this binary has no model (tokenizer) to serve with; run "
        "`oscarkv serve --router_only` (routes over workers that register with "
        "--router_address) or `oscarkv serve` (all-in-one)");
  }
  r.backend_ = std::move(backend);

  HttpServiceOptions hopts;
  hopts.served_model_name = config.served_model_name;
  hopts.default_max_tokens = config.default_max_tokens;
  hopts.default_codec = config.default_codec;
  hopts.limits.max_tokens_limit = config.max_tokens_limit;
  hopts.limits.allow_codec_override = config.allow_codec_override;
  hopts.limits.allowed_codecs = config.allowed_codecs;
  hopts.request_timeout = absl::Seconds(config.request_timeout_s);
  hopts.max_body_bytes = config.max_body_bytes;
  r.http_service_ = std::make_unique<RouterHttpService>(hopts, r.backend_, r.tracker_.get(),
                                                        r.metrics_.get(), r.registry_);
  r.http_ = std::make_unique<httplib::Server>();
  const int threads = config.http_threads;
  r.http_->new_task_queue = [threads] {
    return new metrics::ConnectionThreads(std::min(threads, kIdleConnectionThreads), threads,
                                 kConnectionThreadIdleExit);
  };
  r.http_->set_payload_max_length(config.max_body_bytes);
  r.http_->set_read_timeout(30, 0);
  r.http_->set_write_timeout(30, 0);
  // Each open connection holds a thread: an idle keep-alive client gives it back after 1 s
  // instead of httplib's 5.
  r.http_->set_keep_alive_timeout(1);
  r.http_service_->Register(*r.http_);
  OSCARKV_ASSIGN_OR_RETURN(
      r.http_port_, metrics::BindHttpServer(*r.http_, config.http_host, config.http_port, "router HTTP"));
  if (!config.grpc_address.empty()) {
    r.grpc_service_ = std::make_unique<RouterService>(r.workers_.get(), r.prefix_index_.get(),
                                                      config.heartbeat_interval_s);
    rpc::ServerOptions gopts;
    gopts.listen_address = config.grpc_address;
    absl::StatusOr<std::unique_ptr<rpc::ServerRunner>> runner =
        rpc::ServerRunner::Start(gopts, {r.grpc_service_.get()});
    if (!runner.ok()) return Annotate(runner.status(), "router worker registry gRPC");
    r.grpc_server_ = *std::move(runner);
    LOG(INFO) << "router worker registry (gRPC) listening on " << config.grpc_address
              << " port " << r.grpc_server_->port();
  }
  OSCARKV_RETURN_IF_ERROR(metrics::ListenInBackground(*r.http_, &r.http_thread_, "router HTTP"));
  LOG(INFO) << "router HTTP listening on " << config.http_host << ":" << r.http_port_
            << " (models: " << r.http_service_->Models().front().id << ")";
  return server;
}

RouterServer::~RouterServer() {
  if (http_ == nullptr) return;  // Create failed part-way
  config_.drain_timeout_s = 0;
  Drain();
  Wait();
}

int RouterServer::grpc_port() const { return grpc_server_ ? grpc_server_->port() : 0; }

std::string RouterServer::http_address() const {
  const std::string host =
      (config_.http_host == "0.0.0.0" || config_.http_host.empty()) ? "127.0.0.1" : config_.http_host;
  return absl::StrCat(host, ":", http_port_);
}

void RouterServer::Drain() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  LOG(INFO) << "router draining: " << tracker_->InFlight() << " requests in flight, up to "
            << config_.drain_timeout_s << " s";
  http_service_->SetDraining(true);
  if (!tracker_->WaitForIdle(absl::Seconds(config_.drain_timeout_s))) {
    LOG(WARNING) << "drain timeout: " << tracker_->InFlight()
                 << " requests still in flight are cut off";
    // Each ends with a 503 within a check interval; httplib's stop waits for their handlers.
    http_service_->CutOff();
    tracker_->WaitForIdle(absl::Seconds(2));
  }
  http_->stop();
  if (grpc_server_) grpc_server_->Shutdown(std::chrono::milliseconds(100));
  LOG(INFO) << "router HTTP stopped";
}

void RouterServer::Wait() {
  if (http_thread_.joinable()) http_thread_.join();
}

}  // namespace oscarkv::router
