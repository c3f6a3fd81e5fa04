#include "lib/rpc/server_runner.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "lib/base/log.h"

namespace oscarkv::rpc {
namespace {

// Splits "host:port" (host may be "[v6]"); returns false on a malformed address.
bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  return absl::SimpleAtoi(address.substr(colon + 1), port) && *port >= 0 && *port < 65536;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerRunner>> ServerRunner::Start(
    const ServerOptions& options, const std::vector<grpc::Service*>& services) {
  std::string host;
  int requested_port = 0;
  if (!SplitHostPort(options.listen_address, &host, &requested_port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address must be host:port, got '", options.listen_address, "'"));
  }
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Our clients ping every second at most while a call is in flight (channel_factory.h); answer
  // them rather than closing the connection as "too many pings" (gRPC's default allows one per
  // 5 minutes without data).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS,
                              options.min_pollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              options.max_pollers);
  for (grpc::Service* service : services) {
    CHECK(service != nullptr);
    builder.RegisterService(service);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("could not bind gRPC server to ", options.listen_address));
  }
  LOG(INFO) << "gRPC server listening on " << host << ":" << bound_port;
  return std::unique_ptr<ServerRunner>(new ServerRunner(std::move(server), host, bound_port));
}

ServerRunner::ServerRunner(std::unique_ptr<grpc::Server> server, std::string host, int port)
    : server_(std::move(server)), host_(std::move(host)), port_(port) {}

ServerRunner::~ServerRunner() { Shutdown(std::chrono::milliseconds(0)); }

std::string ServerRunner::dial_address() const {
  const bool wildcard = host_ == "0.0.0.0" || host_ == "[::]" || host_ == "::" || host_.empty();
  return absl::StrCat(wildcard ? "127.0.0.1" : host_, ":", port_);
}

void ServerRunner::Shutdown(std::chrono::milliseconds drain) {
  // grpc::Server::Shutdown is itself thread-safe and idempotent; the flag only avoids the log.
  if (!shut_down_.exchange(true)) {
    LOG(INFO) << "gRPC server on port " << port_ << " draining for up to " << drain.count()
              << " ms";
  }
  server_->Shutdown(std::chrono::system_clock::now() + drain);
}

void ServerRunner::Wait() { server_->Wait(); }

}  // namespace oscarkv::rpc
