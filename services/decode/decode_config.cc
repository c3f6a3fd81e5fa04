#include "services/decode/decode_config.h"

#include <iostream>

#include "lib/base/status_macros.h"
#include "lib/quant/codec_spec.h"
#include "lib/rpc/service_flags.h"
#include "lib/rpc/worker_flags.h"
#include "lib/rpc/worker_registration.h"
#include "CLI/CLI.hpp"

namespace oscarkv::decode {

void DecodeConfig::AddFlags(CLI::App& app, DecodeConfig& c) {
  rpc::AddWorkerEndpointFlags(app, c.grpc_address, c.metrics_host, c.metrics_port);
  app.add_option("--worker_id", c.worker_id, "worker id")->capture_default_str();
  rpc::AddWorkerModelFlags(app, c.model, c.codec, c.calibration, quant::ServableCodecNames());
  app.add_option("--chunk_tokens", c.chunk_tokens, "prefill chunk the blocks were made with")
      ->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads (0 = OpenBLAS default)")
      ->capture_default_str();
  rpc::AddDeviceFlag(app, c.device);
  rpc::AddGpuDirectFlag(app, c.gpu_direct_kv);
  rpc::AddTransferFlags(app, c.transfer_backend, c.ucx_transports, c.ucx_peer_failure_detection);
  app.add_option("--max_batch", c.max_batch, "largest decode batch")->capture_default_str();
  app.add_option("--kv_capacity_bytes", c.kv_capacity_bytes,
                 "KV bytes across sequences, each counted at prompt + max_new_tokens (on a "
                 "GPU: its KV pages)")
      ->capture_default_str();
  app.add_option("--default_max_new_tokens", c.default_max_new_tokens,
                 "tokens reserved for generation when a request does not say")
      ->capture_default_str();
  app.add_option("--idle_ttl_seconds", c.idle_ttl_seconds, "idle sequence lifetime")
      ->capture_default_str();
  app.add_option("--receive_ttl_seconds", c.receive_ttl_seconds,
                 "how long a push reservation waits for its blocks and Generate")
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
  OSCARKV_RETURN_IF_ERROR(rpc::ParseWorkerFlags(
      argc, argv, "oscarkv_decode: the oscarkv decode worker (token pool, continuous batching)",
      "oscarkv_decode", [&config](CLI::App& app) { AddFlags(app, config); }));
  return config;
}

absl::Status DecodeConfig::Validate() const {
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateServiceEndpoint(grpc_address, metrics_port, worker_id));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateRegistrationFlags(router_address, advertise_address));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateWorkerModelFlags(model, codec, chunk_tokens, threads));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateTransferFlags(transfer_backend, ucx_transports));
  OSCARKV_RETURN_IF_ERROR(rpc::ParseDeviceFlag(device).status());
  if (default_max_new_tokens < 1) {
    return absl::InvalidArgumentError("--default_max_new_tokens must be >= 1");
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
  if (!(receive_ttl_seconds > 0)) {
    return absl::InvalidArgumentError("--receive_ttl_seconds must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::decode
