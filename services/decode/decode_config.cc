#include "services/decode/decode_config.h"

#include <iostream>

#include "lib/base/status_macros.h"
#include "lib/rpc/service_flags.h"
#include "lib/rpc/worker_registration.h"
#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"

namespace oscarkv::decode {

void DecodeConfig::AddFlags(CLI::App& app, DecodeConfig& c) {
  app.add_option("--grpc_address", c.grpc_address, "gRPC listen host:port (port 0 = any)")
      ->capture_default_str();
  app.add_option("--metrics_host", c.metrics_host, "host of /metrics /healthz /readyz")
      ->capture_default_str();
  app.add_option("--metrics_port", c.metrics_port, "port of /metrics (0 = any, -1 = off)")
      ->capture_default_str();
  app.add_option("--worker_id", c.worker_id, "worker id")->capture_default_str();
  app.add_option("--model", c.model, "GGUF path or 'default'")->capture_default_str();
  app.add_option("--codec", c.codec, "KV codec (bf16, oscar, kivi2, ...)")->capture_default_str();
  app.add_option("--calibration", c.calibration,
                 "calibration file (default: data/calibration/smollm2-135m-<codec>.cal for oscar/oscar-gram)")
      ->capture_default_str();
  app.add_option("--chunk_tokens", c.chunk_tokens, "prefill chunk the blocks were made with")
      ->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads (0 = OpenBLAS default)")
      ->capture_default_str();
  app.add_option("--transfer_backend", c.transfer_backend, "data plane: ucx | local")
      ->capture_default_str();
  app.add_option("--ucx_transports", c.ucx_transports, "UCX transports (UCX_TLS)")
      ->capture_default_str();
  app.add_option("--ucx_peer_failure_detection", c.ucx_peer_failure_detection,
                 "detect dead UCX peers (disables UCX shared memory)")
      ->capture_default_str();
  app.add_option("--max_batch", c.max_batch, "largest decode batch")->capture_default_str();
  app.add_option("--kv_capacity_bytes", c.kv_capacity_bytes, "KV bytes held across sequences")
      ->capture_default_str();
  app.add_option("--idle_ttl_seconds", c.idle_ttl_seconds, "idle sequence lifetime")
      ->capture_default_str();
  app.add_option("--max_keep_seconds", c.max_keep_seconds, "longest EndTurn keep")
      ->capture_default_str();
  rpc::AddRegistrationFlags(app, c.router_address, c.advertise_address);
  app.add_option("--drain_seconds", c.drain_seconds, "drain time on SIGTERM")
      ->capture_default_str();
  app.add_option("--v", c.verbosity, "VLOG verbosity")->capture_default_str();
}

absl::StatusOr<DecodeConfig> DecodeConfig::FromFlags(int argc, const char* const* argv) {
  DecodeConfig config;
  CLI::App app("oscarkv_decode: the oscarkv decode worker (token pool, continuous batching)",
               "oscarkv_decode");
  app.set_config("--config", "", "config file (TOML or INI); flags override it");
  AddFlags(app, config);
  OSCARKV_RETURN_IF_ERROR(rpc::ParseServiceFlags(app, argc, argv));
  return config;
}

absl::Status DecodeConfig::Validate() const {
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateServiceEndpoint(grpc_address, metrics_port, worker_id));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateRegistrationFlags(router_address, advertise_address));
  if (model.empty()) return absl::InvalidArgumentError("--model must not be empty");
  if (codec.empty()) return absl::InvalidArgumentError("--codec must not be empty");
  if (chunk_tokens <= 0 || chunk_tokens % 64 != 0) {
    return absl::InvalidArgumentError("--chunk_tokens must be a positive multiple of 64");
  }
  if (threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (transfer_backend != "ucx" && transfer_backend != "local") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transfer_backend must be ucx or local, got '", transfer_backend, "'"));
  }
  if (transfer_backend == "ucx" && ucx_transports.empty()) {
    return absl::InvalidArgumentError("--ucx_transports must not be empty");
  }
  if (max_batch < 1 || max_batch > 4096) {
    return absl::InvalidArgumentError("--max_batch must be in [1, 4096]");
  }
  if (kv_capacity_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("--kv_capacity_bytes must be at least 1 MiB");
  }
  if (!(idle_ttl_seconds > 0) || !(max_keep_seconds > 0) || !(drain_seconds >= 0)) {
    return absl::InvalidArgumentError("idle and keep times must be > 0 and drain >= 0");
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::decode
