#include "services/decode/kv_fetcher.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"

namespace oscarkv::decode {

absl::StatusOr<FetchedBlocks> KvFetcher::Fetch(std::span<const BlockSource> sources,
                                               const kvformat::BlockExpectations& expect) const {
  if (sources.empty()) return absl::InvalidArgumentError("no blocks to fetch");
  FetchedBlocks out;
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const BlockSource& s : sources) {
    if (s.bytes <= kvformat::kBlockHeaderBytes || s.peer_address.empty() ||
        s.remote_descriptor.empty()) {
      return absl::InvalidArgumentError("block source without location or size");
    }
    offsets.push_back(total);
    total += s.bytes;
  }
  out.buffer.resize(total);
  OSCARKV_ASSIGN_OR_RETURN(transfer::RegisteredMemory local,
                           backend_->RegisterMemory(std::span<std::byte>(out.buffer)));
  // One batch per peer, all posted before waiting.
  std::map<std::string, transfer::TransferBatch> batches;
  for (size_t i = 0; i < sources.size(); ++i) {
    const BlockSource& s = sources[i];
    transfer::TransferBatch& b = batches[s.peer_address];
    b.peer_address = s.peer_address;
    b.ops.push_back({local.handle, offsets[i], s.remote_descriptor, s.offset, s.bytes,
                     transfer::Direction::kGet});
  }
  absl::Status status;
  std::vector<transfer::TransferId> ids;
  for (auto& [peer, batch] : batches) {
    absl::StatusOr<transfer::TransferId> id = backend_->Post(batch);
    if (!id.ok()) {
      status = id.status();
      break;
    }
    ids.push_back(*id);
  }
  for (transfer::TransferId id : ids) {
    absl::Status s = transfer::WaitForTransfer(*backend_, id, timeout_);
    if (status.ok()) status = s;
  }
  if (absl::Status d = backend_->DeregisterMemory(local.handle); !d.ok()) {
    LOG(WARNING) << "deregistering a fetch buffer failed: " << d;
  }
  OSCARKV_RETURN_IF_ERROR(status);
  out.bytes = total;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::span<const std::byte> bytes(out.buffer.data() + offsets[i], sources[i].bytes);
    kvformat::BlockExpectations e = expect;
    if (sources[i].key.lo != 0 || sources[i].key.hi != 0) e.key = sources[i].key;
    absl::StatusOr<kvformat::BlockView> view = kvformat::ParseBlock(bytes, e);
    if (!view.ok()) return Annotate(view.status(), absl::StrCat("fetched block ", i));
    if (view->header.payload_checksum != sources[i].payload_checksum) {
      return absl::DataLossError(absl::StrCat("block ", i, ": checksum differs from descriptor"));
    }
    out.views.push_back(*view);
  }
  return out;
}

}  // namespace oscarkv::decode
