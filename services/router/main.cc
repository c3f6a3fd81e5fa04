// oscarkv_router: the OpenAI-compatible HTTP front end of oscarkv. Flags → RouterConfig →
// RouterServer; SIGTERM/SIGINT drain, then exit (lib/rpc/service_main.h). See
// services/router/README.md.
#include <iostream>
#include <optional>

#include "lib/rpc/service_main.h"
#include "services/router/router_config.h"
#include "services/router/router_server.h"

int main(int argc, char** argv) {
  using oscarkv::router::RouterConfig;
  using oscarkv::router::RouterServer;
  std::optional<RouterConfig> config;
  oscarkv::rpc::ServiceMainSteps steps;
  steps.binary = "oscarkv_router";
  steps.service = "router";
  steps.configure = [&]() -> absl::Status {
    // FromFlags validates too; RouterServer::Create sets the VLOG level.
    absl::StatusOr<RouterConfig> parsed = RouterConfig::FromFlags(argc, argv, std::cout);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
    return absl::OkStatus();
  };
  steps.start = [&]() -> absl::StatusOr<std::function<void()>> {
    absl::StatusOr<std::unique_ptr<RouterServer>> server = RouterServer::Create(*config);
    if (!server.ok()) return server.status();
    return [server = std::shared_ptr<RouterServer>(*std::move(server))] {
      server->Drain();
      server->Wait();
    };
  };
  return oscarkv::rpc::RunServiceMain(steps);
}
