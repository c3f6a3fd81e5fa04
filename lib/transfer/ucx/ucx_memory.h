// RAII for ucp_mem_h: a registered region and its packed remote key. The remote descriptor that
// peers receive is (base address u64, length u64, rkey bytes), little-endian.
#ifndef OSCARKV_LIB_TRANSFER_UCX_UCX_MEMORY_H_
#define OSCARKV_LIB_TRANSFER_UCX_UCX_MEMORY_H_

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace oscarkv::transfer::ucx {

// A decoded remote descriptor; `rkey` points into the string it was decoded from.
struct UcxRemoteRegion {
  uint64_t base = 0;
  uint64_t length = 0;
  std::string rkey;
};
std::string EncodeRemoteRegion(const UcxRemoteRegion& region);
// @return kInvalidArgument for a malformed descriptor.
absl::StatusOr<UcxRemoteRegion> DecodeRemoteRegion(const std::string& bytes);

// The context must outlive the memory.
class UcxMemory {
 public:
  static absl::StatusOr<std::unique_ptr<UcxMemory>> Create(ucp_context_h context,
                                                           std::span<std::byte> region);
  ~UcxMemory();
  UcxMemory(const UcxMemory&) = delete;
  UcxMemory& operator=(const UcxMemory&) = delete;

  std::span<std::byte> region() const { return region_; }
  const std::string& remote_descriptor() const { return remote_descriptor_; }

 private:
  UcxMemory(ucp_context_h context, ucp_mem_h memh, std::span<std::byte> region,
            std::string descriptor)
      : context_(context), memh_(memh), region_(region),
        remote_descriptor_(std::move(descriptor)) {}
  ucp_context_h context_;
  ucp_mem_h memh_;
  std::span<std::byte> region_;
  std::string remote_descriptor_;
};

// RAII for ucp_rkey_h: a peer's remote key unpacked for one endpoint. The endpoint must outlive it.
class UcxRkey {
 public:
  static absl::StatusOr<std::unique_ptr<UcxRkey>> Create(ucp_ep_h ep, const std::string& packed);
  ~UcxRkey() { ucp_rkey_destroy(rkey_); }
  UcxRkey(const UcxRkey&) = delete;
  UcxRkey& operator=(const UcxRkey&) = delete;
  ucp_rkey_h get() const { return rkey_; }

 private:
  explicit UcxRkey(ucp_rkey_h rkey) : rkey_(rkey) {}
  ucp_rkey_h rkey_;
};

}  // namespace oscarkv::transfer::ucx

#endif  // OSCARKV_LIB_TRANSFER_UCX_UCX_MEMORY_H_
