#include "lib/rpc/cancellable_call.h"

#include <memory>

#include "absl/synchronization/mutex.h"

namespace oscarkv::rpc {

grpc::Status WaitCancellable(grpc::ClientContext* ctx, const StartCall& start,
                             const std::function<bool()>& cancelled, absl::Duration poll) {
  // Shared with the callback, which may still be unlocking when the wait below returns.
  struct Outcome {
    absl::Mutex mu;
    bool done = false;
    grpc::Status status;
  };
  auto outcome = std::make_shared<Outcome>();
  start([outcome](grpc::Status s) {
    absl::MutexLock lock(&outcome->mu);
    outcome->status = std::move(s);
    outcome->done = true;
  });
  bool cancel_sent = false;
  absl::MutexLock lock(&outcome->mu);
  while (!outcome->done) {
    if (cancel_sent || !cancelled) {
      outcome->mu.Await(absl::Condition(&outcome->done));
      break;
    }
    outcome->mu.AwaitWithTimeout(absl::Condition(&outcome->done), poll);
    if (!outcome->done && cancelled()) {
      ctx->TryCancel();
      cancel_sent = true;
    }
  }
  return outcome->status;
}

}  // namespace oscarkv::rpc
