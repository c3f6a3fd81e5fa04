#include "services/router/router_config.h"

#include <algorithm>
#include <sstream>

#include "lib/quant/codec_spec.h"
#include "lib/rpc/service_flags.h"
#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace oscarkv::router {

void RouterConfig::AddFlags(CLI::App& app, RouterConfig& c) {
  app.add_option("--http_host", c.http_host, "HTTP listen host")->capture_default_str();
  app.add_option("--port,--http_port", c.http_port, "HTTP port (OpenAI API, /metrics); 0 = any")
      ->capture_default_str();
  app.add_option("--http_threads", c.http_threads, "Most HTTP connection threads (one per open connection, started on demand)")->capture_default_str();
  app.add_option("--max_body_bytes", c.max_body_bytes, "Largest request body")->capture_default_str();
  app.add_option("--grpc_address", c.grpc_address,
                 "Worker registry gRPC listen address; empty disables it")
      ->capture_default_str();
  app.add_option("--served_model_name", c.served_model_name,
                 "Model id clients use; empty = the backend's model id")
      ->capture_default_str();
  app.add_option("--default_max_tokens", c.default_max_tokens,
                 "max_tokens when a request gives none")
      ->capture_default_str();
  app.add_option("--max_tokens_limit", c.max_tokens_limit, "Largest accepted max_tokens")
      ->capture_default_str();
  app.add_option("--request_timeout_s", c.request_timeout_s,
                 "Seconds from admission to the last token before 504")
      ->capture_default_str();
  app.add_option("--codec", c.default_codec, "Default KV codec")->capture_default_str();
  app.add_option("--allow_codec_override", c.allow_codec_override,
                 "Whether requests may choose a codec (field `codec`)")
      ->capture_default_str();
  app.add_option("--allowed_codecs", c.allowed_codecs, "Codecs a request may choose")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--heartbeat_interval_s", c.heartbeat_interval_s, "Expected worker heartbeat period")
      ->capture_default_str();
  app.add_option("--suspect_after_missed", c.suspect_after_missed,
                 "Missed heartbeats before a worker gets no new requests")
      ->capture_default_str();
  app.add_option("--dead_after_missed", c.dead_after_missed,
                 "Missed heartbeats before a worker is declared dead")
      ->capture_default_str();
  app.add_option("--overlap_weight", c.overlap_weight, "Placement: weight of blocks to prefill")
      ->capture_default_str();
  app.add_option("--shared_credit", c.shared_credit,
                 "Placement: credit per prefix block held by the kvstore")
      ->capture_default_str();
  app.add_option("--active_request_weight", c.active_request_weight,
                 "Placement: cost per running request")
      ->capture_default_str();
  app.add_option("--block_tokens", c.block_tokens, "Tokens per KV block")->capture_default_str();
  app.add_option("--max_index_keys_per_worker", c.max_index_keys_per_worker,
                 "Block keys remembered per worker for placement")
      ->capture_default_str();
  app.add_option("--drain_timeout_s", c.drain_timeout_s,
                 "Seconds in-flight requests get after SIGTERM")
      ->capture_default_str();
  app.add_option("-v,--verbosity", c.verbosity, "VLOG level")->capture_default_str();
  // Hidden (empty group): for the OpenAI-client e2e test only; see router_config.h.
  app.add_flag("--testing_echo_backend", c.testing_echo_backend,
               "TESTING ONLY: deterministic echo backend, no workers")
      ->group("");
}

absl::StatusOr<RouterConfig> RouterConfig::FromFlags(int argc, const char* const* argv,
                                                     std::ostream& out) {
  RouterConfig config;
  CLI::App app{"oscarkv_router: OpenAI-compatible HTTP front end, worker registry and KV-aware "
               "placement"};
  app.set_config("--config", "", "Read flags from a TOML/INI file; flags given override it");
  // A misspelt key in the file is an error, not a silently used default.
  app.allow_config_extras(CLI::config_extras_mode::error);
  AddFlags(app, config);
  if (absl::Status s = rpc::ParseServiceFlags(app, argc, argv, out); !s.ok()) return s;
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return config;
}

absl::Status RouterConfig::Validate() const {
  auto bad = [](std::string_view field, auto value, std::string_view want) {
    std::ostringstream os;
    os << "invalid --" << field << "=" << value << ": " << want;
    return absl::InvalidArgumentError(os.str());
  };
  if (http_port < 0 || http_port > 65535) return bad("port", http_port, "want 0..65535");
  if (http_threads < 2) return bad("http_threads", http_threads, "want >= 2");
  if (max_body_bytes < 1024) return bad("max_body_bytes", max_body_bytes, "want >= 1024");
  if (default_max_tokens < 1) return bad("default_max_tokens", default_max_tokens, "want >= 1");
  if (max_tokens_limit < 1) return bad("max_tokens_limit", max_tokens_limit, "want >= 1");
  if (default_max_tokens > max_tokens_limit) {
    return bad("default_max_tokens", default_max_tokens,
               absl::StrCat("want <= --max_tokens_limit (", max_tokens_limit, ")"));
  }
  if (!(request_timeout_s > 0)) return bad("request_timeout_s", request_timeout_s, "want > 0");
  if (allowed_codecs.empty()) return bad("allowed_codecs", "", "want at least one codec");
  // Names come from the codec table (lib/quant), so a typo fails here and not on first use.
  const std::string servable = absl::StrJoin(quant::ServableCodecNames(), ", ");
  for (const std::string& codec : allowed_codecs) {
    const absl::StatusOr<const quant::CodecSpec*> spec = quant::FindCodec(codec);
    if (!spec.ok()) {
      return bad("allowed_codecs", codec,
                 absl::StrCat("unknown codec; servable codecs: ", servable));
    }
    if (!quant::Servable(**spec)) {
      return bad("allowed_codecs", codec,
                 absl::StrCat("evaluation-only codec; servable codecs: ", servable));
    }
  }
  if (!quant::FindCodec(default_codec).ok()) {
    return bad("codec", default_codec,
               absl::StrCat("unknown codec; valid codecs: ", quant::CodecNames()));
  }
  if (std::find(allowed_codecs.begin(), allowed_codecs.end(), default_codec) ==
      allowed_codecs.end()) {
    return bad("codec", default_codec,
               absl::StrCat("must be one of --allowed_codecs (", absl::StrJoin(allowed_codecs, ","),
                            ")"));
  }
  if (!(heartbeat_interval_s > 0)) {
    return bad("heartbeat_interval_s", heartbeat_interval_s, "want > 0");
  }
  if (suspect_after_missed < 1) return bad("suspect_after_missed", suspect_after_missed, "want >= 1");
  if (dead_after_missed < suspect_after_missed) {
    return bad("dead_after_missed", dead_after_missed, "want >= --suspect_after_missed");
  }
  if (!(overlap_weight >= 0)) return bad("overlap_weight", overlap_weight, "want >= 0");
  if (!(shared_credit >= 0 && shared_credit <= 1)) {
    return bad("shared_credit", shared_credit, "want in [0, 1]");
  }
  if (!(active_request_weight >= 0)) {
    return bad("active_request_weight", active_request_weight, "want >= 0");
  }
  if (block_tokens < 1 || block_tokens > 65535) return bad("block_tokens", block_tokens, "want 1..65535");
  if (max_index_keys_per_worker < 1) {
    return bad("max_index_keys_per_worker", max_index_keys_per_worker, "want >= 1");
  }
  if (!(drain_timeout_s >= 0)) return bad("drain_timeout_s", drain_timeout_s, "want >= 0");
  return absl::OkStatus();
}

}  // namespace oscarkv::router
