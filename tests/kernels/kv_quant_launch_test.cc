// The CUDA quantizer's launchers refuse bad arguments before any CUDA call, so these run on the
// host (no GPU): the pointers below are never dereferenced. The kernels themselves are checked
// against KvQuantRef on the device (kv_quant_gpu_test).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/attention/decode_attention.h"
#include "kernels/quant/kv_quant_cuda.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {
namespace {

// Addresses that are never read or written: every case below fails before a launch.
const uint16_t* const kFakeRows = reinterpret_cast<const uint16_t*>(uintptr_t{0x10000});
uint8_t* const kFakeOut = reinterpret_cast<uint8_t*>(uintptr_t{0x20000});
const int32_t* const kFakePageIds = reinterpret_cast<const int32_t*>(uintptr_t{0x30000});

KvQuantParams K128(int tokens) {
  KvQuantParams p;
  p.input_bf16 = kFakeRows;
  p.output = kFakeOut;
  p.tokens = tokens;
  p.heads = 8;
  p.head_dim = 128;
  p.clip_ratio = 0.96f;
  return p;
}

TEST(KvQuantCudaLaunch, RefusesBadArgumentsBeforeLaunching) {
  KvQuantParams p = K128(64);
  p.output = nullptr;
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorInvalidValue);

  p = K128(64);
  p.input_f32 = reinterpret_cast<const float*>(kFakeRows);  // both inputs
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorInvalidValue);

  p = K128(0);
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorInvalidValue);

  p = K128(64);
  p.clip_ratio = 0.0f;
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorInvalidValue);

  p = K128(64);
  p.head_dim = 96;
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorNotSupported);

  p = K128(64);
  p.input_token_stride = 8 * 128 - 1;  // heads overlap
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorInvalidValue);

  p = K128(64);
  p.output = kFakeOut + 1;  // params are 16-bit stores
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorInvalidValue);
}

TEST(KvQuantCudaLaunch, RefusesALinearSegmentOf4GiBOrMore) {
  // 2^27 tokens x (32 code bytes + 4 param bytes) per head at D = 128: past the 32-bit offsets
  // into a segment that the kernels are tested with.
  const KvQuantParams p = K128(1 << 27);
  ASSERT_GE(kvformat::SegmentBytes(p.kind, p.tokens, p.head_dim), size_t{1} << 32);
  EXPECT_EQ(KvQuantCuda(p, nullptr), cudaErrorInvalidValue);
}

TEST(DemoteToPagesCudaLaunch, RefusesBadTargetsBeforeLaunching) {
  const KvQuantParams p = K128(64);
  DemotePagesTarget t;
  t.pool = kFakeOut;
  t.page_ids = kFakePageIds;
  t.page_stride_bytes = 8 * int64_t{Int2PageUnitBytes(128)};
  t.head_stride_bytes = Int2PageUnitBytes(128);

  DemotePagesTarget no_pool = t;
  no_pool.pool = nullptr;
  EXPECT_EQ(DemoteToPagesCuda(p, no_pool, nullptr), cudaErrorInvalidValue);

  DemotePagesTarget no_ids = t;
  no_ids.page_ids = nullptr;
  EXPECT_EQ(DemoteToPagesCuda(p, no_ids, nullptr), cudaErrorInvalidValue);

  DemotePagesTarget odd = t;
  odd.segment_offset_bytes = 1;
  EXPECT_EQ(DemoteToPagesCuda(p, odd, nullptr), cudaErrorInvalidValue);

  KvQuantParams grouped = p;  // KIVI-2 groups have no paged layout
  grouped.kind = kvformat::SegmentKind::kInt2ChannelGroup;
  EXPECT_EQ(DemoteToPagesCuda(grouped, t, nullptr), cudaErrorNotSupported);
}

}  // namespace
}  // namespace oscarkv::kernels
