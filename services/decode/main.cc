// oscarkv_decode: flags → DecodeConfig → Validate() → DecodeServer::Create() → wait for
// SIGTERM/SIGINT → drain.
#include <iostream>

#include "lib/base/log.h"
#include "lib/rpc/shutdown_signal.h"
#include "services/decode/decode_config.h"
#include "services/decode/decode_server.h"

int main(int argc, char** argv) {
  oscarkv::rpc::InstallShutdownSignalHandlers();
  absl::StatusOr<oscarkv::decode::DecodeConfig> config =
      oscarkv::decode::DecodeConfig::FromFlags(argc, argv);
  if (!config.ok()) {
    if (absl::IsCancelled(config.status())) return 0;  // --help
    std::cerr << "oscarkv_decode: " << config.status().message() << "\n";
    return 2;
  }
  if (absl::Status valid = config->Validate(); !valid.ok()) {
    std::cerr << "oscarkv_decode: " << valid.message() << "\n";
    return 2;
  }
  oscarkv::SetVerbosity(config->verbosity);
  auto server = oscarkv::decode::DecodeServer::Create(*config);
  if (!server.ok()) {
    LOG(ERROR) << "decode failed to start: " << server.status();
    return 1;
  }
  const int signal = oscarkv::rpc::WaitForShutdownSignal();
  LOG(INFO) << "signal " << signal << " received, draining";
  (*server)->Shutdown();
  return 0;
}
