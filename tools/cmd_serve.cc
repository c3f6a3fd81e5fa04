// `oscarkv serve`: the all-in-one server. Router (OpenAI HTTP API), prefill worker, decode worker
// and kvstore run in ONE process, talking gRPC over loopback and moving KV blocks through the
// in-process (local) transfer backend, with the default model on CPU. SIGTERM/SIGINT drain.
//
// With --router_only it runs only the router in registry mode: workers register with it
// (their --router_address points at --router_grpc_address) and each request is placed on a
// (prefill, decode) pair by prefix overlap and load (the four-process topology,
// scripts/run_four_processes.sh). With --prefill_address and --decode_address it runs only the
// router, in front of one fixed remote pair.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/metrics/metrics.h"
#include "lib/model/model.h"
#include "lib/quant/codec_spec.h"
#include "lib/rpc/shutdown_signal.h"
#include "lib/rpc/worker_flags.h"
#include "lib/transfer/local/local_backend.h"
#include "services/decode/decode_server.h"
#include "services/kvstore/kvstore_config.h"
#include "services/kvstore/kvstore_server.h"
#include "services/prefill/prefill_server.h"
#include "services/router/router_metrics.h"
#include "services/router/router_server.h"
#include "services/router_backend/worker_completion_backend.h"
#include "tools/commands.h"

namespace oscarkv::tools {
namespace {

struct ServeFlags {
  std::string host = "0.0.0.0";    // HTTP host; Default: 0.0.0.0
  int port = 8000;                  // HTTP port (0 = any free port); Default: 8000
  std::string model = "default";    // GGUF path or "default"; Default: default
  std::string codec = "oscar";      // KV codec; Default: oscar
  std::string calibration;          // Default: the codec's default file if needed
  int threads = 0;                  // CPU threads (0 = OpenBLAS default); Default: 0
  int chunk_tokens = 256;           // prefill chunk; Default: 256
  int max_batch = 32;               // decode batch; Default: 32
  uint64_t kvstore_capacity_bytes = uint64_t{1} << 30;  // Default: 1 GiB
  bool no_kvstore = false;          // run without the kvstore (no prefix reuse); Default: false
  std::string prefill_address;      // router only: remote prefill worker; Default: none
  std::string decode_address;       // router only: remote decode worker; Default: none
  bool router_only = false;         // router only, workers register with it; Default: false
  std::string router_grpc_address = "0.0.0.0:9000";  // --router_only registry; Default: 0.0.0.0:9000
  double heartbeat_interval_s = 2;  // --router_only: heartbeat interval; Default: 2
  double request_timeout_s = 300;   // Default: 300
  double prefill_busy_wait_s = 300;  // wait for a busy prefill worker before 429; Default: 300
  int http_threads = 1024;          // most HTTP connection threads; Default: 1024
  int verbosity = 0;                // Default: 0
};

// Checks what the servers would reject only after the model loaded and other servers started,
// and what nothing checks later; names serve's own flags.
absl::Status ValidateServeFlags(const ServeFlags& f) {
  if (f.port < 0 || f.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port must be in [0, 65535], got ", f.port));
  }
  OSCARKV_RETURN_IF_ERROR(
      rpc::ValidateWorkerModelFlags(f.model, f.codec, f.chunk_tokens, f.threads));
  if (!(f.prefill_busy_wait_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill_busy_wait_s must be >= 0, got ", f.prefill_busy_wait_s));
  }
  if (f.http_threads < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_threads must be >= 2, got ", f.http_threads));
  }
  if (!f.no_kvstore) {
    OSCARKV_RETURN_IF_ERROR(
        kvstore::ValidateCapacityBytes(f.kvstore_capacity_bytes, "--kvstore_capacity_bytes"));
  }
  return absl::OkStatus();
}

absl::Status RunServe(const ServeFlags& f) {
  OSCARKV_RETURN_IF_ERROR(ValidateServeFlags(f));
  rpc::InstallShutdownSignalHandlers();
  SetVerbosity(f.verbosity);
  const bool static_router = !f.prefill_address.empty() || !f.decode_address.empty();
  if (static_router && (f.prefill_address.empty() || f.decode_address.empty())) {
    return absl::InvalidArgumentError("--prefill_address and --decode_address go together");
  }
  if (static_router && f.router_only) {
    return absl::InvalidArgumentError(
        "--router_only places over registered workers; drop --prefill_address/--decode_address");
  }
  if (f.router_only && f.router_grpc_address.empty()) {
    return absl::InvalidArgumentError("--router_only needs --router_grpc_address");
  }
  const bool router_only = static_router || f.router_only;
  metrics::Registry registry;
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(f.model));
  model::ModelOptions mo;
  mo.threads = f.threads;
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::Model::Load(path, mo));
  OSCARKV_RETURN_IF_ERROR(RequireTokenizer(*m, "serve"));
  // The id /v1/models lists: the file name up to its first dot
  // ("SmolLM2-135M-Instruct.Q4_1.gguf" → "SmolLM2-135M-Instruct"), else the GGUF's general.name.
  std::string model_id = std::filesystem::path(path).filename().string();
  model_id = model_id.substr(0, model_id.find('.'));
  if (model_id.empty()) model_id = m->gguf().GetString("general.name").value_or("oscarkv-model");

  std::unique_ptr<engine::ServingEngine> engine;
  std::unique_ptr<transfer::TransferBackend> kv_backend, prefill_backend, decode_backend;
  std::unique_ptr<kvstore::KvStoreServer> kv;
  std::unique_ptr<prefill::PrefillServer> pf;
  std::unique_ptr<decode::DecodeServer> dc;
  std::string prefill_address = f.prefill_address, decode_address = f.decode_address;
  if (!router_only || f.router_only) {
    // Registry mode computes the workers' block keys, which depend on the calibration too.
    OSCARKV_ASSIGN_OR_RETURN(engine, decode::LoadServingEngine(m.get(), f.codec, f.calibration,
                                                               f.chunk_tokens));
  }
  if (!router_only) {
    OSCARKV_ASSIGN_OR_RETURN(kv_backend, transfer::LocalBackend::Create());
    OSCARKV_ASSIGN_OR_RETURN(prefill_backend, transfer::LocalBackend::Create());
    OSCARKV_ASSIGN_OR_RETURN(decode_backend, transfer::LocalBackend::Create());
    std::string kv_address;
    if (!f.no_kvstore) {
      kvstore::KvStoreConfig kc;
      kc.grpc_address = "127.0.0.1:0";
      kc.metrics_port = -1;  // the router's /metrics serves the shared registry
      kc.transfer_backend = "local";
      kc.capacity_bytes = f.kvstore_capacity_bytes;
      OSCARKV_ASSIGN_OR_RETURN(kv, kvstore::KvStoreServer::Create(
                                       kc, {.backend = kv_backend.get(), .registry = &registry}));
      kv_address = kv->grpc_dial_address();
    }
    prefill::PrefillConfig pc;
    pc.grpc_address = "127.0.0.1:0";
    pc.metrics_port = -1;
    pc.transfer_backend = "local";
    pc.codec = f.codec;
    pc.kvstore_address = kv_address;
    OSCARKV_ASSIGN_OR_RETURN(pf, prefill::PrefillServer::Create(
                                     pc, {.backend = prefill_backend.get(),
                                          .registry = &registry,
                                          .engine = engine.get()}));
    decode::DecodeConfig dcfg;
    dcfg.grpc_address = "127.0.0.1:0";
    dcfg.metrics_port = -1;
    dcfg.transfer_backend = "local";
    dcfg.codec = f.codec;
    dcfg.max_batch = f.max_batch;
    OSCARKV_ASSIGN_OR_RETURN(dc, decode::DecodeServer::Create(
                                     dcfg, {.backend = decode_backend.get(),
                                            .registry = &registry,
                                            .engine = engine.get()}));
    prefill_address = pf->grpc_dial_address();
    decode_address = dc->grpc_dial_address();
  }

  router_backend::WorkerBackendOptions bo;
  bo.model_id = model_id;
  bo.context_length = static_cast<int>(m->config().context_length);
  bo.use_kvstore = !f.no_kvstore;
  bo.busy_wait_seconds = f.prefill_busy_wait_s;
  router::RouterConfig rc;
  rc.http_host = f.host;
  rc.http_port = f.port;
  rc.grpc_address = "";  // static workers: no registry
  rc.default_codec = f.codec;
  rc.allowed_codecs = {f.codec};
  rc.request_timeout_s = f.request_timeout_s;
  rc.http_threads = f.http_threads;
  std::unique_ptr<router::RouterServer> router;
  if (f.router_only) {
    rc.grpc_address = f.router_grpc_address;
    rc.heartbeat_interval_s = f.heartbeat_interval_s;
    rc.block_tokens = engine->options().block_tokens;
    const kvformat::KeyChainParams key_params = engine->KeyParams();
    const model::Tokenizer* tokenizer = &m->tokenizer();
    OSCARKV_ASSIGN_OR_RETURN(
        router, router::RouterServer::CreateWithBackendFactory(
                    rc,
                    [&](router::RouterServer& server)
                        -> absl::StatusOr<std::shared_ptr<router::CompletionBackend>> {
                      bo.registry = router_backend::RegistryPlacement{
                          .workers = &server.workers(),
                          .prefix_index = &server.prefix_index(),
                          .policy = &server.placement(),
                          .key_params = key_params,
                          .on_placement = [&metrics = server.metrics()](
                                              bool ok, int matched, int requested) {
                            metrics.OnPlacement(ok, matched, requested);
                          },
                          .on_resume = [&metrics = server.metrics()](
                                           bool ok) { metrics.OnResume(ok); }};
                      OSCARKV_ASSIGN_OR_RETURN(
                          std::unique_ptr<router_backend::WorkerCompletionBackend> b,
                          router_backend::WorkerCompletionBackend::Create(bo, tokenizer));
                      return std::shared_ptr<router::CompletionBackend>(std::move(b));
                    },
                    &registry));
  } else {
    bo.prefill_address = prefill_address;
    bo.decode_address = decode_address;
    OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<router_backend::WorkerCompletionBackend> backend,
                             router_backend::WorkerCompletionBackend::Create(bo, &m->tokenizer()));
    OSCARKV_ASSIGN_OR_RETURN(
        router, router::RouterServer::Create(
                    rc, std::shared_ptr<router::CompletionBackend>(std::move(backend)), &registry));
  }
  LOG(INFO) << "oscarkv serve: "
            << (f.router_only ? "router over registered workers"
                              : (router_only ? "router for remote workers" : "all-in-one"))
            << ", model " << model_id << ", codec " << f.codec << ", listening on http://"
            << router->http_address() << "/v1";
  std::cout << "oscarkv serve: ready at http://" << router->http_address() << "/v1";
  if (f.router_only) std::cout << " (worker registry on port " << router->grpc_port() << ")";
  std::cout << std::endl;
  const int sig = rpc::WaitForShutdownSignal();
  LOG(INFO) << "signal " << sig << " received, draining";
  router->Drain();
  router->Wait();
  if (pf) pf->Shutdown();
  if (dc) dc->Shutdown();
  if (kv) kv->Shutdown();
  return absl::OkStatus();
}

void RegisterServeCommand(CLI::App& app, CommandResult& result) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "All-in-one server: router + prefill + decode + kvstore in one process (CPU)");
  cmd->add_option("--host", f->host, "HTTP host")->capture_default_str();
  cmd->add_option("--port", f->port, "HTTP port of the OpenAI API (0 = any)")->capture_default_str();
  cmd->add_option("--model", f->model, "GGUF path or 'default' (SmolLM2-135M-Instruct)")
      ->capture_default_str();
  cmd->add_option("--codec", f->codec, "KV codec")
      ->check(CLI::IsMember(quant::ServableCodecNames()))
      ->capture_default_str();
  cmd->add_option("--calibration", f->calibration,
                  "calibration file (default: data/calibration/smollm2-135m-<codec>.cal for oscar/oscar-gram)");
  cmd->add_option("--threads", f->threads, "CPU threads (0 = OpenBLAS default)")
      ->capture_default_str();
  cmd->add_option("--chunk_tokens", f->chunk_tokens, "prefill chunk (multiple of 64)")
      ->capture_default_str();
  cmd->add_option("--max_batch", f->max_batch, "largest decode batch")->capture_default_str();
  cmd->add_option("--kvstore_capacity_bytes", f->kvstore_capacity_bytes, "kvstore pool bytes")
      ->capture_default_str();
  cmd->add_flag("--no_kvstore", f->no_kvstore, "run without the kvstore (no prefix reuse)");
  cmd->add_option("--prefill_address", f->prefill_address,
                  "router only: gRPC host:port of a remote prefill worker");
  cmd->add_option("--decode_address", f->decode_address,
                  "router only: gRPC host:port of a remote decode worker");
  cmd->add_flag("--router_only", f->router_only,
               "run only the router; workers register with it (their --router_address)");
  cmd->add_option("--router_grpc_address", f->router_grpc_address,
                  "--router_only: gRPC host:port of the worker registry (port 0 = any)")
      ->capture_default_str();
  cmd->add_option("--heartbeat_interval_s", f->heartbeat_interval_s,
                  "--router_only: seconds between worker heartbeats")
      ->capture_default_str();
  cmd->add_option("--request_timeout_s", f->request_timeout_s, "per-request deadline")
      ->capture_default_str();
  cmd->add_option("--prefill_busy_wait_s", f->prefill_busy_wait_s,
                  "how long a request waits for a busy prefill worker before HTTP 429 (>= 0)")
      ->capture_default_str();
  cmd->add_option("--http_threads", f->http_threads,
                  "most HTTP connection threads (one per open connection, started on demand)")
      ->capture_default_str();
  cmd->add_option("--v", f->verbosity, "VLOG verbosity")->capture_default_str();
  cmd->callback([f, &result] { result.status = RunServe(*f); });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterServeCommand);
}  // namespace oscarkv::tools
