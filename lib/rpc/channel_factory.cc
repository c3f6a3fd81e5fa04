#include "lib/rpc/channel_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace oscarkv::rpc {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // Keep pinging while a call waits on a silent peer (gRPC stops after 2 pings without data).
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  const int backoff_ms = static_cast<int>(options.max_reconnect_backoff.count());
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(backoff_ms, 250));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const std::string& address,
                                                       const ChannelOptions& options) {
  std::shared_ptr<grpc::Channel> channel = MakeChannel(address, options);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + options.connect_timeout)) {
    return absl::UnavailableError(absl::StrCat("could not connect to ", address, " within ",
                                               options.connect_timeout.count(), " ms"));
  }
  return channel;
}

std::unique_ptr<grpc::ClientContext> MakeContext(std::chrono::milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

}  // namespace oscarkv::rpc
