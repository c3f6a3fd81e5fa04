#include "lib/rpc/worker_flags.h"

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/rpc/service_flags.h"

namespace oscarkv::rpc {

absl::Status ParseWorkerFlags(int argc, const char* const* argv, const std::string& description,
                              const std::string& name,
                              const std::function<void(CLI::App&)>& add_flags) {
  CLI::App app(description, name);
  app.set_config("--config", "", "config file (TOML or INI); flags override it");
  // A misspelt key in the file is an error, not a silently used default.
  app.allow_config_extras(CLI::config_extras_mode::error);
  add_flags(app);
  return ParseServiceFlags(app, argc, argv);
}

void AddWorkerEndpointFlags(CLI::App& app, std::string& grpc_address, std::string& metrics_host,
                            int& metrics_port) {
  app.add_option("--grpc_address", grpc_address, "gRPC listen host:port (port 0 = any)")
      ->capture_default_str();
  app.add_option("--metrics_host", metrics_host, "host of /metrics /healthz /readyz")
      ->capture_default_str();
  app.add_option("--metrics_port", metrics_port, "port of /metrics (0 = any, -1 = off)")
      ->capture_default_str();
}

void AddWorkerModelFlags(CLI::App& app, std::string& model, std::string& codec,
                         std::string& calibration, const std::vector<std::string>& codecs) {
  app.add_option("--model", model, "GGUF path or 'default'")->capture_default_str();
  app.add_option("--codec", codec, "KV codec")->check(CLI::IsMember(codecs))->capture_default_str();
  app.add_option("--calibration", calibration,
                 "calibration file (default: data/calibration/smollm2-135m-<codec>.cal for "
                 "oscar/oscar-gram)")
      ->capture_default_str();
}

absl::Status ValidateWorkerModelFlags(const std::string& model, const std::string& codec,
                                      int chunk_tokens, int threads) {
  if (model.empty()) return absl::InvalidArgumentError("--model must not be empty");
  if (codec.empty()) return absl::InvalidArgumentError("--codec must not be empty");
  if (chunk_tokens <= 0 || chunk_tokens % 64 != 0) {
    return absl::InvalidArgumentError("--chunk_tokens must be a positive multiple of 64");
  }
  if (threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  return absl::OkStatus();
}

void AddTransferFlags(CLI::App& app, std::string& transfer_backend, std::string& ucx_transports,
                      bool& ucx_peer_failure_detection) {
  app.add_option("--transfer_backend", transfer_backend, "data plane: ucx | local")
      ->capture_default_str();
  app.add_option("--ucx_transports", ucx_transports, "UCX transports (UCX_TLS)")
      ->capture_default_str();
  app.add_option("--ucx_peer_failure_detection", ucx_peer_failure_detection,
                 "detect dead UCX peers (disables UCX shared memory)")
      ->capture_default_str();
}

absl::Status ValidateTransferFlags(const std::string& transfer_backend,
                                   const std::string& ucx_transports) {
  if (transfer_backend != "ucx" && transfer_backend != "local") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transfer_backend must be ucx or local, got '", transfer_backend, "'"));
  }
  if (transfer_backend == "ucx" && ucx_transports.empty()) {
    return absl::InvalidArgumentError("--ucx_transports must not be empty");
  }
  return absl::OkStatus();
}

void AddDeviceFlag(CLI::App& app, std::string& device) {
  app.add_option("--device", device,
                 "where the model runs: cpu, or cuda:N (GPU N; needs a CUDA build)")
      ->capture_default_str();
}

void AddGpuDirectFlag(CLI::App& app, bool& gpu_direct_kv) {
  app.add_option("--gpu_direct_kv", gpu_direct_kv,
                 "on a GPU with a CUDA-capable transfer backend (UCX with cuda_copy,cuda_ipc in "
                 "--ucx_transports), move a prompt's KV GPU to GPU in packed form instead of as "
                 "blocks through host memory")
      ->capture_default_str();
}

absl::StatusOr<int> ParseDeviceFlag(const std::string& device) {
  if (device == "cpu") return -1;
  int ordinal = -1;
  if (absl::StartsWith(device, "cuda:") && absl::SimpleAtoi(device.substr(5), &ordinal) &&
      ordinal >= 0) {
    return ordinal;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device must be cpu or cuda:N, got '", device, "'"));
}

}  // namespace oscarkv::rpc
