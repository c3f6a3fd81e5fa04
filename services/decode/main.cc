// oscarkv_decode: flags → DecodeConfig → Validate() → DecodeServer::Create() → wait for
// SIGTERM/SIGINT → drain (lib/rpc/service_main.h).
#include "lib/rpc/service_main.h"
#include "services/decode/decode_config.h"
#include "services/decode/decode_server.h"

int main(int argc, char** argv) {
  using oscarkv::decode::DecodeConfig;
  using oscarkv::decode::DecodeServer;
  return oscarkv::rpc::RunWorkerMain<DecodeConfig, DecodeServer>(argc, argv, "oscarkv_decode",
                                                                 "decode");
}
