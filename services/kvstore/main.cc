// oscarkv_kvstore: flags → KvStoreConfig → Validate() → KvStoreServer::Create() → wait for
// SIGTERM/SIGINT → drain.
#include <iostream>

#include "lib/base/log.h"
#include "lib/rpc/shutdown_signal.h"
#include "services/kvstore/kvstore_config.h"
#include "services/kvstore/kvstore_server.h"

int main(int argc, char** argv) {
  oscarkv::rpc::InstallShutdownSignalHandlers();
  absl::StatusOr<oscarkv::kvstore::KvStoreConfig> config =
      oscarkv::kvstore::KvStoreConfig::FromFlags(argc, argv);
  if (!config.ok()) {
    if (absl::IsCancelled(config.status())) return 0;  // --help
    std::cerr << "oscarkv_kvstore: " << config.status().message() << "\n";
    return 2;
  }
  if (absl::Status valid = config->Validate(); !valid.ok()) {
    std::cerr << "oscarkv_kvstore: " << valid.message() << "\n";
    return 2;
  }
  oscarkv::SetVerbosity(config->verbosity);
  auto server = oscarkv::kvstore::KvStoreServer::Create(*config);
  if (!server.ok()) {
    LOG(ERROR) << "kvstore failed to start: " << server.status();
    return 1;
  }
  const int signal = oscarkv::rpc::WaitForShutdownSignal();
  LOG(INFO) << "signal " << signal << " received, draining";
  (*server)->Shutdown();
  return 0;
}
