#include "services/kvstore/kvstore_config.h"

#include <iostream>

#include "lib/base/status_macros.h"
#include "lib/rpc/service_flags.h"
#include "lib/rpc/worker_registration.h"
#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"

namespace oscarkv::kvstore {

void KvStoreConfig::AddFlags(CLI::App& app, KvStoreConfig& c) {
  app.add_option("--grpc_address", c.grpc_address, "gRPC listen host:port (port 0 = any)")
      ->capture_default_str();
  app.add_option("--metrics_host", c.metrics_host, "host of /metrics /healthz /readyz")
      ->capture_default_str();
  app.add_option("--metrics_port", c.metrics_port, "port of /metrics (0 = any, -1 = off)")
      ->capture_default_str();
  app.add_option("--worker_id", c.worker_id, "id reported in block locations")
      ->capture_default_str();
  app.add_option("--capacity_bytes", c.capacity_bytes, "host pool size in bytes")
      ->capture_default_str();
  app.add_option("--transfer_backend", c.transfer_backend, "data plane: ucx | local")
      ->capture_default_str();
  app.add_option("--ucx_transports", c.ucx_transports, "UCX transports (UCX_TLS)")
      ->capture_default_str();
  app.add_option("--ucx_peer_failure_detection", c.ucx_peer_failure_detection,
                 "detect dead UCX peers (disables UCX shared memory)")
      ->capture_default_str();
  app.add_option("--read_lease_seconds", c.read_lease_seconds, "read lease per lookup")
      ->capture_default_str();
  app.add_option("--reservation_seconds", c.reservation_seconds, "time to commit a reservation")
      ->capture_default_str();
  app.add_option("--max_pin_seconds", c.max_pin_seconds, "longest session pin")
      ->capture_default_str();
  app.add_option("--verify_on_commit", c.verify_on_commit, "verify checksums at commit")
      ->capture_default_str();
  rpc::AddRegistrationFlags(app, c.router_address, c.advertise_address);
  app.add_option("--drain_seconds", c.drain_seconds, "drain time on SIGTERM")
      ->capture_default_str();
  app.add_option("--sweep_interval_seconds", c.sweep_interval_seconds, "expiry sweep period")
      ->capture_default_str();
  app.add_option("--v", c.verbosity, "VLOG verbosity")->capture_default_str();
}

absl::StatusOr<KvStoreConfig> KvStoreConfig::FromFlags(int argc, const char* const* argv) {
  KvStoreConfig config;
  CLI::App app("oscarkv_kvstore: the oscarkv block store (index, host pool, pins, eviction)",
               "oscarkv_kvstore");
  app.set_config("--config", "", "config file (TOML or INI); flags override it");
  AddFlags(app, config);
  OSCARKV_RETURN_IF_ERROR(rpc::ParseServiceFlags(app, argc, argv));
  return config;
}

absl::Status KvStoreConfig::Validate() const {
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateServiceEndpoint(grpc_address, metrics_port, worker_id));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateRegistrationFlags(router_address, advertise_address));
  if (capacity_bytes < (uint64_t{1} << 20)) {
    return absl::InvalidArgumentError("--capacity_bytes must be at least 1 MiB");
  }
  if (transfer_backend != "ucx" && transfer_backend != "local") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transfer_backend must be ucx or local, got '", transfer_backend, "'"));
  }
  if (transfer_backend == "ucx" && ucx_transports.empty()) {
    return absl::InvalidArgumentError("--ucx_transports must not be empty");
  }
  if (!(read_lease_seconds > 0) || !(reservation_seconds > 0) || !(max_pin_seconds > 0) ||
      !(drain_seconds >= 0) || !(sweep_interval_seconds > 0)) {
    return absl::InvalidArgumentError(
        "lease, reservation, pin and sweep times must be > 0 and drain >= 0");
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::kvstore
