// The kvstore's one config struct (STYLE habit 12): every field with its default; FromFlags reads
// a config file first (--config, TOML/INI as CLI11 reads it) and lets flags override it.
#ifndef OSCARKV_SERVICES_KVSTORE_KVSTORE_CONFIG_H_
#define OSCARKV_SERVICES_KVSTORE_KVSTORE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace CLI {
class App;
}

namespace oscarkv::kvstore {

// Largest accepted pool (256 TiB), far above any host's memory. It also catches negative flag
// values, which CLI11 reads into uint64_t as 2^64 - n.
inline constexpr uint64_t kMaxCapacityBytes = uint64_t{1} << 48;

// kInvalidArgument naming `flag` unless `bytes` is in [1 MiB, kMaxCapacityBytes]. Shared with
// `oscarkv serve`, whose flag for the same value is --kvstore_capacity_bytes.
absl::Status ValidateCapacityBytes(uint64_t bytes, absl::string_view flag);

struct KvStoreConfig {
  // gRPC listen address; port 0 picks a free port. Default: "0.0.0.0:50061".
  std::string grpc_address = "0.0.0.0:50061";
  // Host and port of /metrics, /healthz, /readyz; port 0 = ephemeral, -1 = off.
  std::string metrics_host = "0.0.0.0";  // Default: "0.0.0.0"
  int metrics_port = 9461;               // Default: 9461
  // Id reported in BlockLocation.worker_id. Default: "kvstore-0".
  std::string worker_id = "kvstore-0";
  // Host pool size in bytes, 1 MiB .. kMaxCapacityBytes. Default: 1 GiB.
  uint64_t capacity_bytes = uint64_t{1} << 30;
  // Data plane: "ucx" (other processes and hosts) or "local" (in-process, all-in-one mode).
  std::string transfer_backend = "ucx";  // Default: "ucx"
  // UCX transports (UCX_TLS, set through ucp_config_modify). Default: "tcp,self,sm".
  std::string ucx_transports = "tcp,self,sm";
  // Detect dead UCX peers (transfers fail instead of hanging). UCX 1.13 cannot use shared
  // memory in that mode, so same-host peers use TCP. Default: true.
  bool ucx_peer_failure_detection = true;
  // Read lease granted with lookups, seconds. Default: 10.
  double read_lease_seconds = 10;
  // Time a writer has between Reserve and Commit, seconds. Default: 30.
  double reservation_seconds = 30;
  // Longest allowed session pin, seconds. Default: 86400 (24 h).
  double max_pin_seconds = 86400;
  // Verify header and payload checksum of every block at commit. Default: true.
  bool verify_on_commit = true;
  // Router worker-registry gRPC address ("host:port"): register there at start (retrying until
  // the router is up), heartbeat load, deregister on drain. Empty = no registration. Default: "".
  std::string router_address;
  // gRPC "host:port" the router hands out for this worker; empty = 127.0.0.1:<bound port>
  // (right only when the router runs on this machine). Default: "".
  std::string advertise_address;
  // Time in-flight RPCs get to finish on SIGTERM, seconds. Default: 5.
  double drain_seconds = 5;
  // Period of the expiry sweep (reservations, pins, leases), seconds. Default: 1.
  double sweep_interval_seconds = 1;
  // VLOG verbosity. Default: 0.
  int verbosity = 0;

  // Adds every field as a flag of `app` (for `oscarkv serve`, which hosts all four services).
  static void AddFlags(CLI::App& app, KvStoreConfig& config);
  // Parses argv. @return kCancelled after printing --help (exit 0), kInvalidArgument for a bad
  // flag or config file (message says which).
  static absl::StatusOr<KvStoreConfig> FromFlags(int argc, const char* const* argv);
  // @return kInvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

}  // namespace oscarkv::kvstore

#endif  // OSCARKV_SERVICES_KVSTORE_KVSTORE_CONFIG_H_
