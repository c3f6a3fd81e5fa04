// Runs one gRPC server: builds it from a list of services, binds the requested address (port 0
// asks the OS for a free port, reported by port()), and shuts it down gracefully (stop accepting,
// let in-flight calls finish until a deadline, then cancel the rest).
#ifndef OSCARKV_LIB_RPC_SERVER_RUNNER_H_
#define OSCARKV_LIB_RPC_SERVER_RUNNER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace grpc {
class Service;
}

namespace oscarkv::rpc {

struct ServerOptions {
  // "host:port" to listen on; port 0 picks a free port. Default: "0.0.0.0:0".
  std::string listen_address = "0.0.0.0:0";
  // Largest message accepted and sent, bytes. Default: 16 MiB (metadata only; KV bytes never
  // travel over gRPC).
  int max_message_bytes = 16 << 20;
  // Threads of the synchronous server's pool (min/max). Default: 1 / 16.
  int min_pollers = 1;
  int max_pollers = 16;
};

// Owns a running grpc::Server. The services passed to Start must outlive the runner.
// Thread-safe: Shutdown may be called from any thread (e.g. a signal watcher), once or more.
class ServerRunner {
 public:
  // Builds and starts the server. `services` are not owned and must not be null.
  // @return kInvalidArgument for a malformed address, kUnavailable when binding fails.
  static absl::StatusOr<std::unique_ptr<ServerRunner>> Start(
      const ServerOptions& options, const std::vector<grpc::Service*>& services);

  ~ServerRunner();  // Shutdown(0s) if not yet shut down.
  ServerRunner(const ServerRunner&) = delete;
  ServerRunner& operator=(const ServerRunner&) = delete;

  // The bound port (the chosen one when the options asked for port 0).
  int port() const { return port_; }
  // "host:port" that a client on this machine can dial (127.0.0.1 for wildcard hosts).
  std::string dial_address() const;

  // Stops accepting calls and waits for in-flight calls until `drain` has passed, then cancels
  // what is left. Idempotent.
  void Shutdown(std::chrono::milliseconds drain);
  // Blocks until the server has shut down.
  void Wait();

 private:
  ServerRunner(std::unique_ptr<grpc::Server> server, std::string host, int port);

  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_SERVER_RUNNER_H_
