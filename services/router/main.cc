// oscarkv_router: the OpenAI-compatible HTTP front end of oscarkv. Flags → RouterConfig →
// RouterServer; SIGTERM/SIGINT drain, then exit. See services/router/README.md.
#include <iostream>

#include "lib/base/log.h"
#include "lib/rpc/shutdown_signal.h"
#include "services/router/router_config.h"
#include "services/router/router_server.h"

int main(int argc, char** argv) {
  using oscarkv::router::RouterConfig;
  using oscarkv::router::RouterServer;
  oscarkv::rpc::InstallShutdownSignalHandlers();
  absl::StatusOr<RouterConfig> config = RouterConfig::FromFlags(argc, argv, std::cout);
  if (absl::IsCancelled(config.status())) return 0;  // --help
  if (!config.ok()) {
    std::cerr << "oscarkv_router: " << config.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<RouterServer>> server = RouterServer::Create(*config);
  if (!server.ok()) {
    LOG(ERROR) << "router failed to start: " << server.status();
    return 1;
  }
  const int sig = oscarkv::rpc::WaitForShutdownSignal();
  LOG(INFO) << "signal " << sig << " received";
  (*server)->Drain();
  (*server)->Wait();
  return 0;
}
