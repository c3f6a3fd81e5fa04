#include "services/prefill/prefill_config.h"

#include <iostream>

#include "lib/base/status_macros.h"
#include "lib/quant/codec_spec.h"
#include "lib/rpc/service_flags.h"
#include "lib/rpc/worker_flags.h"
#include "lib/rpc/worker_registration.h"
#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"

namespace oscarkv::prefill {

void PrefillConfig::AddFlags(CLI::App& app, PrefillConfig& c) {
  rpc::AddWorkerEndpointFlags(app, c.grpc_address, c.metrics_host, c.metrics_port);
  app.add_option("--worker_id", c.worker_id, "worker id")->capture_default_str();
  rpc::AddWorkerModelFlags(app, c.model, c.codec, c.calibration, quant::ServableCodecNames());
  app.add_option("--chunk_tokens", c.chunk_tokens, "prefill chunk (multiple of 64)")
      ->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads (0 = OpenBLAS default)")
      ->capture_default_str();
  rpc::AddDeviceFlag(app, c.device);
  app.add_option("--gpu_prefill", c.gpu_prefill,
                 "GPU prefill: chunked (shares the kvstore) | one_pass (no kvstore)")
      ->capture_default_str();
  rpc::AddGpuDirectFlag(app, c.gpu_direct_kv);
  app.add_option("--max_prompt_tokens", c.max_prompt_tokens,
                 "longest prompt on a GPU device (sizes its scratch)")
      ->capture_default_str();
  rpc::AddTransferFlags(app, c.transfer_backend, c.ucx_transports, c.ucx_peer_failure_detection);
  app.add_option("--kvstore_address", c.kvstore_address, "kvstore gRPC host:port (empty = none)")
      ->capture_default_str();
  app.add_option("--kvstore_timeout_seconds", c.kvstore_timeout_seconds, "kvstore call deadline")
      ->capture_default_str();
  app.add_option("--max_concurrent", c.max_concurrent, "prefills running at once")
      ->capture_default_str();
  app.add_option("--outbox_ttl_seconds", c.outbox_ttl_seconds,
                 "how long staged blocks (or packed GPU KV) stay readable by decode workers")
      ->capture_default_str();
  app.add_option("--outbox_capacity_bytes", c.outbox_capacity_bytes,
                 "staged block bytes kept (also the GPU outbox size with --gpu_direct_kv)")
      ->capture_default_str();
  rpc::AddRegistrationFlags(app, c.router_address, c.advertise_address);
  app.add_option("--drain_seconds", c.drain_seconds, "drain time on SIGTERM")
      ->capture_default_str();
  app.add_option("--v", c.verbosity, "VLOG verbosity")->capture_default_str();
}

absl::StatusOr<PrefillConfig> PrefillConfig::FromFlags(int argc, const char* const* argv) {
  PrefillConfig config;
  OSCARKV_RETURN_IF_ERROR(rpc::ParseWorkerFlags(
      argc, argv,
      "oscarkv_prefill: the oscarkv prefill worker (prefix reuse, chunked prefill, KV publishing)",
      "oscarkv_prefill", [&config](CLI::App& app) { AddFlags(app, config); }));
  return config;
}

absl::Status PrefillConfig::Validate() const {
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateServiceEndpoint(grpc_address, metrics_port, worker_id));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateRegistrationFlags(router_address, advertise_address));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateWorkerModelFlags(model, codec, chunk_tokens, threads));
  OSCARKV_RETURN_IF_ERROR(rpc::ParseDeviceFlag(device).status());
  if (max_prompt_tokens < chunk_tokens) {
    return absl::InvalidArgumentError("--max_prompt_tokens must be >= --chunk_tokens");
  }
  if (gpu_prefill != "chunked" && gpu_prefill != "one_pass") {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_prefill must be chunked or one_pass, got '", gpu_prefill, "'"));
  }
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateTransferFlags(transfer_backend, ucx_transports));
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
