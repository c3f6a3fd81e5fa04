// The body every service binary's main() shares (STYLE habit 12 keeps main.cc short):
//   1. SIGTERM/SIGINT handlers (lib/rpc/shutdown_signal.h), before anything starts threads;
//   2. the config: --help printed → exit 0; a bad flag, config file or value → "<binary>: <why>"
//      on stderr, exit 2;
//   3. the server: a failed start → LOG(ERROR) "<service> failed to start: <status>", exit 1;
//   4. wait for SIGTERM/SIGINT, log it, stop (drain) the server, exit 0.
#ifndef OSCARKV_LIB_RPC_SERVICE_MAIN_H_
#define OSCARKV_LIB_RPC_SERVICE_MAIN_H_

#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/base/log.h"

namespace oscarkv::rpc {

struct ServiceMainSteps {
  std::string binary;   // prefix of config errors on stderr, e.g. "oscarkv_decode"
  std::string service;  // subject of the start-failure log line, e.g. "decode"
  // Reads and checks the config. kCancelled means --help was printed; any other error is a bad
  // config (its message goes to stderr).
  std::function<absl::Status()> configure;
  // Starts serving. @return the action that stops (drains) the server after the signal; it owns
  // the server, which is destroyed after it ran.
  std::function<absl::StatusOr<std::function<void()>>()> start;
};

// Runs steps 1-4 above; `err` receives the config errors. @return the exit code: 0 after --help
// or a signal, 2 for a bad config, 1 when the server did not start.
int RunServiceMain(const ServiceMainSteps& steps, std::ostream& err = std::cerr);

// RunServiceMain for a worker binary: Config::FromFlags(argc, argv), then Config::Validate(),
// then SetVerbosity(config.verbosity); Server::Create(config) starts it and Server::Shutdown()
// drains it.
template <typename Config, typename Server>
int RunWorkerMain(int argc, const char* const* argv, std::string binary, std::string service) {
  std::optional<Config> config;
  ServiceMainSteps steps;
  steps.binary = std::move(binary);
  steps.service = std::move(service);
  steps.configure = [&]() -> absl::Status {
    absl::StatusOr<Config> parsed = Config::FromFlags(argc, argv);
    if (!parsed.ok()) return parsed.status();
    if (absl::Status valid = parsed->Validate(); !valid.ok()) return valid;
    SetVerbosity(parsed->verbosity);
    config = *std::move(parsed);
    return absl::OkStatus();
  };
  steps.start = [&]() -> absl::StatusOr<std::function<void()>> {
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(*config);
    if (!server.ok()) return server.status();
    return [server = std::shared_ptr<Server>(*std::move(server))] { server->Shutdown(); };
  };
  return RunServiceMain(steps);
}

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_SERVICE_MAIN_H_
