#include "lib/transfer/ucx/ucx_memory.h"

#include <cstring>

#include "lib/transfer/ucx/ucx_status.h"

namespace oscarkv::transfer::ucx {

std::string EncodeRemoteRegion(const UcxRemoteRegion& region) {
  std::string out(16, '\0');
  std::memcpy(out.data(), &region.base, 8);
  std::memcpy(out.data() + 8, &region.length, 8);
  out += region.rkey;
  return out;
}

absl::StatusOr<UcxRemoteRegion> DecodeRemoteRegion(const std::string& bytes) {
  if (bytes.size() <= 16) return absl::InvalidArgumentError("UCX remote descriptor too short");
  UcxRemoteRegion region;
  std::memcpy(&region.base, bytes.data(), 8);
  std::memcpy(&region.length, bytes.data() + 8, 8);
  region.rkey = bytes.substr(16);
  return region;
}

absl::StatusOr<std::unique_ptr<UcxMemory>> UcxMemory::Create(ucp_context_h context,
                                                             std::span<std::byte> region) {
  if (region.empty()) return absl::InvalidArgumentError("cannot register an empty region");
  ucp_mem_map_params_t params = {};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = region.data();
  params.length = region.size();
  ucp_mem_h memh = nullptr;
  absl::Status status = UcsToStatus(ucp_mem_map(context, &params, &memh), "ucp_mem_map");
  if (!status.ok()) return status;
  void* rkey_buffer = nullptr;
  size_t rkey_size = 0;
  status = UcsToStatus(ucp_rkey_pack(context, memh, &rkey_buffer, &rkey_size), "ucp_rkey_pack");
  if (!status.ok()) {
    ucp_mem_unmap(context, memh);
    return status;
  }
  UcxRemoteRegion remote{.base = reinterpret_cast<uint64_t>(region.data()),
                         .length = region.size(),
                         .rkey = std::string(static_cast<const char*>(rkey_buffer), rkey_size)};
  ucp_rkey_buffer_release(rkey_buffer);
  return std::unique_ptr<UcxMemory>(
      new UcxMemory(context, memh, region, EncodeRemoteRegion(remote)));
}

UcxMemory::~UcxMemory() { ucp_mem_unmap(context_, memh_); }

absl::StatusOr<std::unique_ptr<UcxRkey>> UcxRkey::Create(ucp_ep_h ep, const std::string& packed) {
  ucp_rkey_h rkey = nullptr;
  absl::Status status = UcsToStatus(ucp_ep_rkey_unpack(ep, packed.data(), &rkey),
                                    "ucp_ep_rkey_unpack");
  if (!status.ok()) return status;
  return std::unique_ptr<UcxRkey>(new UcxRkey(rkey));
}

}  // namespace oscarkv::transfer::ucx
