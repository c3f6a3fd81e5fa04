// A unary gRPC call whose caller may walk away: started through the stub's callback API and
// waited on while `cancelled` is polled; once it answers true the call is cancelled
// (ClientContext::TryCancel), which the server sees (ServerContext::IsCancelled), and the wait
// goes on until gRPC reports the end. A blocking stub call offers no such point: a caller
// whose client left would hold the server's work until it finished.
#ifndef OSCARKV_LIB_RPC_CANCELLABLE_CALL_H_
#define OSCARKV_LIB_RPC_CANCELLABLE_CALL_H_

#include <functional>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace oscarkv::rpc {

// Starts a call with its completion callback, e.g.
//   [&](auto done) { stub->async()->Prefill(&ctx, &request, &response, std::move(done)); }
using StartCall = std::function<void(std::function<void(grpc::Status)>)>;

// Runs `start` and returns the call's status. `cancelled` (empty: never) is asked every `poll`;
// after it answers true the status is normally CANCELLED (or whatever ended the call first).
grpc::Status WaitCancellable(grpc::ClientContext* ctx, const StartCall& start,
                             const std::function<bool()>& cancelled,
                             absl::Duration poll = absl::Milliseconds(50));

}  // namespace oscarkv::rpc

#endif  // OSCARKV_LIB_RPC_CANCELLABLE_CALL_H_
