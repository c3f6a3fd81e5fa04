// oscarkv_prefill: flags → PrefillConfig → Validate() → PrefillServer::Create() → wait for
// SIGTERM/SIGINT → drain (lib/rpc/service_main.h).
#include "lib/rpc/service_main.h"
#include "services/prefill/prefill_config.h"
#include "services/prefill/prefill_server.h"

int main(int argc, char** argv) {
  using oscarkv::prefill::PrefillConfig;
  using oscarkv::prefill::PrefillServer;
  return oscarkv::rpc::RunWorkerMain<PrefillConfig, PrefillServer>(argc, argv, "oscarkv_prefill",
                                                                   "prefill");
}
