#include "lib/transfer/transfer_backend.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/block.h"

namespace oscarkv::transfer {

absl::Status WaitForTransfer(TransferBackend& backend, TransferId id,
                             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int idle_polls = 0;
  while (true) {
    OSCARKV_ASSIGN_OR_RETURN(TransferState state, backend.Poll(id));
    if (state == TransferState::kDone) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("transfer ", id, " not done after ", timeout.count(), " ms"));
    }
    // Spin briefly (most transfers finish within microseconds), then back off so a waiting
    // thread does not starve the backend's progress thread on small machines.
    if (++idle_polls > 64) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      std::this_thread::yield();
    }
  }
}

absl::Status TransferAndWait(TransferBackend& backend, const TransferBatch& batch,
                             std::chrono::milliseconds timeout) {
  OSCARKV_ASSIGN_OR_RETURN(TransferId id, backend.Post(batch));
  return WaitForTransfer(backend, id, timeout);
}

absl::StatusOr<kvformat::BlockHeader> VerifyBlockOnArrival(
    std::span<const std::byte> bytes, const kvformat::BlockExpectations& expect) {
  absl::StatusOr<kvformat::BlockHeader> header = kvformat::ParseBlockHeader(bytes, expect);
  if (!header.ok()) return Annotate(header.status(), "block failed its arrival check");
  const uint64_t total = kvformat::kBlockHeaderBytes + header->payload_bytes;
  if (bytes.size() < total) {
    return absl::DataLossError(absl::StrCat("block truncated on arrival: ", bytes.size(),
                                            " bytes, header says ", total));
  }
  absl::StatusOr<kvformat::BlockView> view = kvformat::ParseBlock(bytes.first(total), expect);
  if (!view.ok()) return Annotate(view.status(), "block failed its arrival check");
  return view->header;
}

}  // namespace oscarkv::transfer
