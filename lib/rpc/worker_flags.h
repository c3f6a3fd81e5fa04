// Flags the three worker binaries (prefill, decode, kvstore) share, each with one name and help
// text, bound to the caller's config fields (which hold the defaults), and their checks. What
// every service binary shares, the router included, is in service_flags.h; registration flags
// are in worker_registration.h.
#ifndef OSCARKV_LIB_RPC_WORKER_FLAGS_H_
#define OSCARKV_LIB_RPC_WORKER_FLAGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace oscarkv::rpc {

// Parses argv for a worker binary: a CLI::App called `name` with `description`, a --config
// option (TOML or INI; flags override it) and the flags `add_flags` registers.
// @return ParseServiceFlags' statuses: kCancelled after --help, kInvalidArgument for a bad flag
//         or a config file key that names no flag.
absl::Status ParseWorkerFlags(int argc, const char* const* argv, const std::string& description,
                              const std::string& name,
                              const std::function<void(CLI::App&)>& add_flags);

// --grpc_address, --metrics_host and --metrics_port (checked by ValidateServiceEndpoint).
void AddWorkerEndpointFlags(CLI::App& app, std::string& grpc_address, std::string& metrics_host,
                            int& metrics_port);

// --model, --codec (one of `codecs`, which the help lists) and --calibration (the workers that
// run the model: prefill and decode; they pass quant::ServableCodecNames()).
void AddWorkerModelFlags(CLI::App& app, std::string& model, std::string& codec,
                         std::string& calibration, const std::vector<std::string>& codecs);

// kInvalidArgument, naming the first bad flag, unless --model and --codec are non-empty,
// --chunk_tokens is a positive multiple of 64 and --threads >= 0.
absl::Status ValidateWorkerModelFlags(const std::string& model, const std::string& codec,
                                      int chunk_tokens, int threads);

// --transfer_backend, --ucx_transports and --ucx_peer_failure_detection.
void AddTransferFlags(CLI::App& app, std::string& transfer_backend, std::string& ucx_transports,
                      bool& ucx_peer_failure_detection);

// kInvalidArgument unless transfer_backend is "ucx" or "local" and, for ucx, ucx_transports is
// non-empty.
absl::Status ValidateTransferFlags(const std::string& transfer_backend,
                                   const std::string& ucx_transports);

// --device: where the worker runs the model ("cpu" or "cuda:N").
void AddDeviceFlag(CLI::App& app, std::string& device);

// --gpu_direct_kv: a GPU worker whose transfer backend reaches GPU memory hands (prefill, one-pass
// mode) or takes (decode) a prompt's KV GPU to GPU in packed form.
void AddGpuDirectFlag(CLI::App& app, bool& gpu_direct_kv);

// The CUDA ordinal of a --device value, or -1 for "cpu". @return kInvalidArgument for anything
// else.
absl::StatusOr<int> ParseDeviceFlag(const std::string& device);

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_WORKER_FLAGS_H_
