#include "services/kvstore/kvstore_config.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/rpc/service_flags.h"
#include "lib/rpc/worker_flags.h"
#include "lib/rpc/worker_registration.h"
#include "CLI/CLI.hpp"

namespace oscarkv::kvstore {

absl::Status ValidateCapacityBytes(uint64_t bytes, absl::string_view flag) {
  if (bytes >= (uint64_t{1} << 20) && bytes <= kMaxCapacityBytes) return absl::OkStatus();
  // Above 2^63 the value was almost surely typed negative and wrapped.
  const bool wrapped = bytes > (uint64_t{1} << 63);
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " must be between 1 MiB (1048576) and 256 TiB (", kMaxCapacityBytes, "), got ",
      wrapped ? absl::StrCat("a negative value (read as ", bytes, ")") : absl::StrCat(bytes)));
}

void KvStoreConfig::AddFlags(CLI::App& app, KvStoreConfig& c) {
  rpc::AddWorkerEndpointFlags(app, c.grpc_address, c.metrics_host, c.metrics_port);
  app.add_option("--worker_id", c.worker_id, "id reported in block locations")
      ->capture_default_str();
  app.add_option("--capacity_bytes", c.capacity_bytes, "host pool size in bytes")
      ->capture_default_str();
  rpc::AddTransferFlags(app, c.transfer_backend, c.ucx_transports, c.ucx_peer_failure_detection);
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
  OSCARKV_RETURN_IF_ERROR(rpc::ParseWorkerFlags(
      argc, argv, "oscarkv_kvstore: the oscarkv block store (index, host pool, pins, eviction)",
      "oscarkv_kvstore", [&config](CLI::App& app) { AddFlags(app, config); }));
  return config;
}

absl::Status KvStoreConfig::Validate() const {
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateServiceEndpoint(grpc_address, metrics_port, worker_id));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateRegistrationFlags(router_address, advertise_address));
  OSCARKV_RETURN_IF_ERROR(ValidateCapacityBytes(capacity_bytes, "--capacity_bytes"));
  OSCARKV_RETURN_IF_ERROR(rpc::ValidateTransferFlags(transfer_backend, ucx_transports));
  if (!(read_lease_seconds > 0) || !(reservation_seconds > 0) || !(max_pin_seconds > 0) ||
      !(drain_seconds >= 0) || !(sweep_interval_seconds > 0)) {
    return absl::InvalidArgumentError(
        "lease, reservation, pin and sweep times must be > 0 and drain >= 0");
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::kvstore
