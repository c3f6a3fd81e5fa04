// oscarkv_kvstore: flags → KvStoreConfig → Validate() → KvStoreServer::Create() → wait for
// SIGTERM/SIGINT → drain (lib/rpc/service_main.h).
#include "lib/rpc/service_main.h"
#include "services/kvstore/kvstore_config.h"
#include "services/kvstore/kvstore_server.h"

int main(int argc, char** argv) {
  using oscarkv::kvstore::KvStoreConfig;
  using oscarkv::kvstore::KvStoreServer;
  return oscarkv::rpc::RunWorkerMain<KvStoreConfig, KvStoreServer>(argc, argv, "oscarkv_kvstore",
                                                                   "kvstore");
}
