#include "services/prefill/prefill_config.h"

#include <iostream>

#include "lib/base/status_macros.h"
#include "lib/rpc/service_flags.h"
#include "lib/rpc/worker_registration.h"
#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"

namespace oscarkv::prefill {

void PrefillConfig::AddFlags(CLI::App& app, PrefillConfig& c) {
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
  app.add_option("--chunk_tokens", c.chunk_tokens, "prefill chunk (multiple of 64)")
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
  app.add_option("--kvstore_address", c.kvstore_address, "kvstore gRPC host:port (empty = none)")
      ->capture_default_str();
  app.add_option("--kvstore_timeout_seconds", c.kvstore_timeout_seconds, "kvstore call deadline")
      ->capture_default_str();
  app.add_option("--max_concurrent", c.max_concurrent, "prefills running at once")
      ->capture_default_str();
  app.add_option("--outbox_ttl_seconds", c.outbox_ttl_seconds,
                 "how long staged blocks stay readable by decode workers")
      ->capture_default_str();
  app.add_option("--outbox_capacity_bytes", c.outbox_capacity_bytes, "staged block bytes kept")
      ->capture_default_str();
  rpc::AddRegistrationFlags(app, c.router_address, c.advertise_address);
  app.add_option("--drain_seconds", c.drain_seconds, "drain time on SIGTERM")
      ->capture_default_str();
  app.add_option("--v", c.verbosity, "VLOG verbosity")->capture_default_str();
}

absl::StatusOr<PrefillConfig> PrefillConfig::FromFlags(int argc, const char* const* argv) {
  PrefillConfig config;
  CLI::App app("oscarkv_prefill: the oscarkv prefill worker (prefix reuse, chunked prefill, KV publishing)",
               "oscarkv_prefill");
  app.set_config("--config", "", "config file (TOML or INI); flags override it");
  AddFlags(app, config);
  OSCARKV_RETURN_IF_ERROR(rpc::ParseServiceFlags(app, argc, argv));
  return config;
}

absl::Status PrefillConfig::Validate() const {
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
  if (max_concurrent < 1 || max_concurrent > 1024) {
    return absl::InvalidArgumentError("--max_concurrent must be in [1, 1024]");
  }
  if (!kvstore_address.empty() && kvstore_address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvstore_address must be host:port, got '", kvstore_address, "'"));
  }
  if (outbox_capacity_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("--outbox_capacity_bytes must be at least 1 MiB");
  }
  if (!(kvstore_timeout_seconds > 0) || !(outbox_ttl_seconds > 0) || !(drain_seconds >= 0)) {
    return absl::InvalidArgumentError("kvstore timeout and outbox TTL must be > 0, drain >= 0");
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::prefill
