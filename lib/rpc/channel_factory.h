// Client side of lib/rpc: channels to "host:port" addresses and per-call deadlines.
#ifndef OSCARKV_LIB_RPC_CHANNEL_FACTORY_H_
#define OSCARKV_LIB_RPC_CHANNEL_FACTORY_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace oscarkv::rpc {

struct ChannelOptions {
  // Largest message, bytes. Default: 16 MiB.
  int max_message_bytes = 16 << 20;
  // How long Connect() waits for the channel to become ready. Default: 5 s.
  std::chrono::milliseconds connect_timeout{5000};
  // Default per-call deadline used by MakeContext() when none is given. Default: 10 s.
  std::chrono::milliseconds default_call_timeout{10000};
  // While a call is in flight the channel pings the peer every keepalive_time and closes the
  // connection when a ping goes unanswered for keepalive_timeout, so a call to a hung peer
  // (SIGSTOP, wedged host) fails kUnavailable in about their sum instead of at its deadline.
  // No pings while idle. Servers started by ServerRunner accept pings this often.
  // Default: 10 s / 5 s.
  std::chrono::milliseconds keepalive_time{10000};
  std::chrono::milliseconds keepalive_timeout{5000};
  // Longest wait between reconnection attempts after a failure, so that a peer that restarts
  // is reached again within about this long (gRPC's own default grows to 120 s).
  // Default: 1 s.
  std::chrono::milliseconds max_reconnect_backoff{1000};
};

// Creates an insecure channel to `address` without waiting. Never null.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelOptions& options = {});

// Creates a channel and waits until it is connected.
// @return kUnavailable when it is not ready within options.connect_timeout.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const std::string& address,
                                                       const ChannelOptions& options = {});

// A ClientContext whose deadline is now + `timeout`. ClientContext is neither copyable nor
// movable in gRPC 1.51, so it comes back on the heap.
std::unique_ptr<grpc::ClientContext> MakeContext(std::chrono::milliseconds timeout);

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_CHANNEL_FACTORY_H_
