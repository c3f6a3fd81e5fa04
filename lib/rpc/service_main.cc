#include "lib/rpc/service_main.h"

#include "lib/rpc/shutdown_signal.h"

namespace oscarkv::rpc {

int RunServiceMain(const ServiceMainSteps& steps, std::ostream& err) {
  InstallShutdownSignalHandlers();
  if (absl::Status config = steps.configure(); !config.ok()) {
    if (absl::IsCancelled(config)) return 0;  // --help
    err << steps.binary << ": " << config.message() << "\n";
    return 2;
  }
  absl::StatusOr<std::function<void()>> stop = steps.start();
  if (!stop.ok()) {
    LOG(ERROR) << steps.service << " failed to start: " << stop.status();
    return 1;
  }
  const int signal = WaitForShutdownSignal();
  LOG(INFO) << "signal " << signal << " received, draining";
  (*stop)();
  return 0;
}

}  // namespace oscarkv::rpc
