#include "lib/rpc/service_flags.h"

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace oscarkv::rpc {

absl::Status ParseServiceFlags(CLI::App& app, int argc, const char* const* argv,
                               std::ostream& out) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return absl::CancelledError("--help printed");
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse <key>" for a key that names no flag (callers make
    // config extras errors), TOML files included.
    absl::string_view what = e.what();
    if (absl::ConsumePrefix(&what, "INI was not able to parse ")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--config: unknown key '", what, "' (no flag of that name)"));
    }
    return absl::InvalidArgumentError(absl::StrCat("--config: ", what));
  } catch (const CLI::Error& e) {
    // CLI11 names most errors by their kind ("ConversionError"), but an unexpected argument by
    // the app's name, which the caller prints as its prefix already.
    if (e.get_name() == app.get_name()) return absl::InvalidArgumentError(e.what());
    return absl::InvalidArgumentError(absl::StrCat(e.get_name(), ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status ValidateServiceEndpoint(const std::string& grpc_address, int metrics_port,
                                     const std::string& worker_id) {
  if (grpc_address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_address must be host:port, got '", grpc_address, "'"));
  }
  if (metrics_port < -1 || metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics_port must be in [-1, 65535]");
  }
  if (worker_id.empty()) return absl::InvalidArgumentError("--worker_id must not be empty");
  return absl::OkStatus();
}

}  // namespace oscarkv::rpc
