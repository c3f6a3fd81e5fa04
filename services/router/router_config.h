// RouterConfig: every setting of the router, with its default. Built from flags (and an optional
// config file: flags override it) by FromFlags, checked by Validate. Nothing else in the router
// reads flags or the environment (STYLE habit 12), so `oscarkv serve` can fill this struct itself.
#ifndef OSCARKV_SERVICES_ROUTER_ROUTER_CONFIG_H_
#define OSCARKV_SERVICES_ROUTER_ROUTER_CONFIG_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/quant/codec_spec.h"

namespace CLI {
class App;
}

namespace oscarkv::router {

struct RouterConfig {
  // --- HTTP (OpenAI API, /healthz, /readyz, /metrics) ---
  std::string http_host = "0.0.0.0";  // Default: all interfaces
  int http_port = 8000;               // Default: 8000; 0 picks a free port (tests)
  int http_threads = 1024;            // Default: at most 1024 connection threads (one per open
                                      // connection, started on demand); >= 2
  int64_t max_body_bytes = 8 << 20;   // Default: 8 MiB; larger bodies get 413

  // --- gRPC worker registry (workers register and heartbeat here) ---
  std::string grpc_address = "0.0.0.0:9000";  // Default: 0.0.0.0:9000; "" disables it

  // --- Requests ---
  std::string served_model_name;      // Default: "" = the backend's model id
  int default_max_tokens = 256;       // Default: 256 when the request gives none (clipped to the
                                      // context left after the prompt)
  int max_tokens_limit = 4096;        // Default: 4096; requests above get 400
  double request_timeout_s = 300;     // Default: 300 s from admission to the last token; 504 after
  std::string default_codec = "oscar";  // Default: oscar (M6)
  bool allow_codec_override = true;   // Default: true; requests may pick a codec below
  // Default: every codec the workers can serve (quant::ServableCodecNames)
  std::vector<std::string> allowed_codecs = quant::ServableCodecNames();

  // --- Worker health ---
  double heartbeat_interval_s = 2;    // Default: 2 s between worker heartbeats
  int suspect_after_missed = 1;       // Default: 1 missed heartbeat → not placed on
  int dead_after_missed = 3;          // Default: 3 missed heartbeats → dead, forgotten by index

  // --- Placement (placement_policy.h) ---
  double overlap_weight = 1.0;        // Default: 1.0 weight of blocks to prefill vs decode load
  double shared_credit = 0.75;        // Default: 0.75 credit per block found in the kvstore
  double active_request_weight = 0.0; // Default: 0.0 cost per running request
  int block_tokens = 64;              // Default: 64 tokens per KV block (lib/kvformat)
  int64_t max_index_keys_per_worker = 1 << 20;  // Default: 1Mi keys (~48 MiB worst case)

  // --- Lifecycle ---
  double drain_timeout_s = 30;        // Default: 30 s for in-flight requests after SIGTERM
  int verbosity = 0;                  // Default: 0 (VLOG level)

  // TESTING ONLY (hidden flag): serve from a deterministic echo backend instead of workers, so
  // the OpenAI-client e2e test (tests/services/router/openai_client_test.py) can run the binary
  // without a model. Never use it in a deployment. Default: false
  bool testing_echo_backend = false;

  //! Registers every field as a flag on `app` (used by FromFlags and by `oscarkv serve`).
  static void AddFlags(CLI::App& app, RouterConfig& config);

  //! Parses argv (and `--config FILE`, TOML/INI, which flags override), then Validate()s.
  //! --help prints usage to `out` and returns kCancelled, which the caller treats as "exit 0".
  //! @return kInvalidArgument with CLI11's message for bad flags or a failed Validate().
  static absl::StatusOr<RouterConfig> FromFlags(int argc, const char* const* argv,
                                                std::ostream& out);

  //! @return kInvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_ROUTER_CONFIG_H_
