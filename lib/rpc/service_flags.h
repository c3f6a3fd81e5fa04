// Flag handling every service binary shares: CLI11 parsing that turns its exceptions into
// statuses (STYLE habit 8), and the checks of the endpoint fields every worker config has.
#ifndef OSCARKV_LIB_RPC_SERVICE_FLAGS_H_
#define OSCARKV_LIB_RPC_SERVICE_FLAGS_H_

#include <iostream>
#include <string>

#include "absl/status/status.h"

namespace CLI {
class App;
}

namespace oscarkv::rpc {

// Parses argv into the options registered on `app`. On --help, writes the help to `out` and
// returns kCancelled (callers exit 0); a bad flag or config file gives kInvalidArgument.
absl::Status ParseServiceFlags(CLI::App& app, int argc, const char* const* argv,
                               std::ostream& out = std::cout);

// kInvalidArgument unless grpc_address is host:port, metrics_port in [-1, 65535] (-1 = off,
// 0 = any free port) and worker_id non-empty.
absl::Status ValidateServiceEndpoint(const std::string& grpc_address, int metrics_port,
                                     const std::string& worker_id);

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_SERVICE_FLAGS_H_
