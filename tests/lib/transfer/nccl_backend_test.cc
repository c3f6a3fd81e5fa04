// What can be checked of the NCCL backend without a GPU: address parsing and argument checks
// that run before any CUDA or NCCL call. Transfers themselves need two GPUs (label gpu, later).
#include "lib/transfer/nccl/nccl_backend.h"

#include "gtest/gtest.h"

namespace oscarkv::transfer {
namespace {

TEST(NcclBackend, ParsesAddresses) {
  EXPECT_EQ(*ParseNcclAddress("nccl:3"), 3);
  EXPECT_EQ(ParseNcclAddress("nccl:").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNcclAddress("ucx:1").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNcclAddress("nccl:-1").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclBackend, RejectsBadOptionsBeforeTouchingTheGpu) {
  NcclOptions options;
  options.unique_id = "short";
  EXPECT_EQ(NcclBackend::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.unique_id = std::string(128, '\0');  // sizeof(ncclUniqueId)
  options.rank = 2;
  options.world_size = 2;
  EXPECT_EQ(NcclBackend::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace oscarkv::transfer
