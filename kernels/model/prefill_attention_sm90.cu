// Causal BF16 prefill attention at head_dim 64 and 128 on Hopper's warpgroup MMAs (wgmma), the
// path PrefillAttentionCuda takes when the caller passes a workspace (prefill_attention_sm90.h).
//
// Why a second kernel: the mma.sync kernel (prefill_attention.cu) ran at ~208 TFLOP/s on the H200,
// so at 32k tokens the causal attention was 1.53 s of a 2.31 s Qwen3-8B-like prefill
// (bench/e2e/RESULTS.md). It loads f32 rows through registers every key tile and issues the
// products warp by warp.
//
// Shape: a block's two consumer warpgroups own 128 query rows of one query head (64 each) and walk
// the key tiles of 128 from 0 to its diagonal with an online softmax:
//   S = Q K^T   m64n128k16 wgmma, Q and K from shared memory (D / 16 k-steps);
//   O += P V    m64nDk16 wgmma, P from registers (the S accumulators rounded to bf16, in the
//               mma.sync A-fragment layout, which is wgmma's register-A layout), V^T from shared
//               memory (8 k-steps over the tile's keys).
// A pre-pass (StageKvKernel) rounds K and V to bf16 once per call into the workspace, K as
// [keys][D] and V transposed as [D][keys], keys padded with zeros to a multiple of 128, each
// tile of 128 keys already in the 128-byte-swizzled layout of wgmma.cuh (128 x D bf16), so
// both B operands are K-major and a tile arrives in shared memory by two bulk copies into a ring
// of 3 stages (full / empty mbarriers per stage), issued by one thread of a producer warpgroup
// that hands most of its registers to the two consumer warpgroups (setmaxnreg).
// The two warpgroups take turns at the tensor cores (FlashAttention-3's ping-pong): in its turn a
// warpgroup issues S of tile j together with P V of tile j - 1, passes the turn, and runs the
// softmax of tile j while the other warpgroup's products run. Q is rounded to bf16 through
// registers once per block. The arithmetic per row (masking, the online softmax and its -inf
// rules, bf16 rounding of q, K, V and P, f32 accumulation, and the order of O's rescale and P V
// additions) is that of the mma.sync kernel, but for the summation order inside the products and
// P's exponential, which flushes values below 2^-126 to zero (cuda::Exp2): for P they are 0
// against a row sum >= 1, which the bf16 rounding of P would not keep anyway.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/model/mbarrier.cuh"
#include "kernels/model/model_kernels_cuda.h"
#include "kernels/model/prefill_attention_rows.cuh"
#include "kernels/model/prefill_attention_sm90.h"
#include "kernels/model/wgmma.cuh"

namespace oscarkv::kernels {
namespace {

using cuda::PackBf16x2;

constexpr int kWarpgroups = 2;  // consumers
constexpr int kConsumerThreads = 128 * kWarpgroups;
constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
constexpr int kBlockM = 64 * kWarpgroups;         // query rows per block
constexpr int kBlockN = 128;                      // keys per tile
constexpr int kStages = 3;
// Q (128 rows), one K tile (128 keys) or one V^T tile (kD rows of 128 keys), bf16.
template <int kD>
constexpr uint32_t kTileBytes = 128 * kD * 2;
// From one 64-column block of a tile to the next: Q and K tiles have 128 rows, V^T tiles kD.
constexpr uint32_t kQkBlockBytes = 128 * 128;
template <int kD>
constexpr uint32_t kVtBlockBytes = kD * 128;
// Q, the stages' K and V^T, the barriers; + slack for the 1024-byte alignment of the tiles.
template <int kD>
constexpr int kSmemBytes = (1 + 2 * kStages) * kTileBytes<kD> + 2 * kStages * 8 + 1024;
constexpr int kStageKeys = 64;       // keys per pre-pass block
constexpr int kConsumerBarrier = 1;  // named barrier of the consumer threads (0: __syncthreads)

int64_t PaddedKeys(int64_t kv_len) { return (kv_len + kBlockN - 1) / kBlockN * kBlockN; }

// K and V of keys [key0, key0 + 64) of KV head blockIdx.y, rounded to bf16, into the
// workspace's tiles: tile (h, j) of K at k_ws + (h * tiles + j) * kTileBytes holds key 128 j + r,
// channel c at SwizzledOffset(128, r, c); V^T's tile holds channel c, key 128 j + r at
// SwizzledOffset(128, c, r) (V goes through shared memory to be transposed). Keys >= kv_len are
// written as zeros.
template <int kD>
__global__ void __launch_bounds__(256)
    StageKvKernel(const __grid_constant__ PrefillAttentionParams p, int kv_len, int tiles,
                  uint8_t* k_ws, uint8_t* vt_ws) {
  __shared__ __align__(16) uint16_t sv[kD][kStageKeys + 8];
  const int key0 = blockIdx.x * kStageKeys, h = blockIdx.y;
  const int64_t tile = static_cast<int64_t>(h) * tiles + key0 / kBlockN;
  uint8_t* k_tile = k_ws + tile * kTileBytes<kD>;
  uint8_t* vt_tile = vt_ws + tile * kTileBytes<kD>;
  const int r0 = key0 % kBlockN;
  for (int i = threadIdx.x; i < kStageKeys * kD / 4; i += blockDim.x) {
    const int r = i / (kD / 4), c4 = i % (kD / 4);
    const int key = key0 + r;
    float4 kf = make_float4(0.f, 0.f, 0.f, 0.f), vf = kf;
    if (key < kv_len) {
      kf = __ldg(reinterpret_cast<const float4*>(p.k + key * p.k_row_stride + h * kD) + c4);
      vf = __ldg(reinterpret_cast<const float4*>(p.v + key * p.v_row_stride + h * kD) + c4);
    }
    *reinterpret_cast<uint2*>(k_tile + wgmma::SwizzledOffset(kBlockN, r0 + r, 4 * c4)) =
        make_uint2(PackBf16x2(kf.x, kf.y), PackBf16x2(kf.z, kf.w));
    const uint32_t lo = PackBf16x2(vf.x, vf.y), hi = PackBf16x2(vf.z, vf.w);
    sv[4 * c4 + 0][r] = static_cast<uint16_t>(lo);
    sv[4 * c4 + 1][r] = static_cast<uint16_t>(lo >> 16);
    sv[4 * c4 + 2][r] = static_cast<uint16_t>(hi);
    sv[4 * c4 + 3][r] = static_cast<uint16_t>(hi >> 16);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kD * (kStageKeys / 8); i += blockDim.x) {
    const int d = i / (kStageKeys / 8), c = i % (kStageKeys / 8);
    *reinterpret_cast<uint4*>(vt_tile + wgmma::SwizzledOffset(kD, d, r0 + 8 * c)) =
        *reinterpret_cast<const uint4*>(&sv[d][8 * c]);
  }
}

// Pins the accumulators at this point of the program: the compiler may not move their reads or
// writes across it (wgmma writes them asynchronously, behind the asm's back).
template <int N>
__device__ __forceinline__ void PinRegisters(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void PinRegisters(uint32_t (&a)[kBlockN / 16][4]) {
#pragma unroll
  for (int i = 0; i < kBlockN / 16; ++i) {
#pragma unroll
    for (int k = 0; k < 4; ++k) asm volatile("" : "+r"(a[i][k])::"memory");
  }
}

// O += P V over one tile: 8 k-steps of 16 keys, P from registers, V^T K-major at v_tile.
template <int kD>
__device__ __forceinline__ void IssuePv(float (&o)[kD / 2], const uint32_t (&pa)[kBlockN / 16][4],
                                        uint32_t v_tile) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    wgmma::MmaRS(o, pa[kk],
                 wgmma::SmemDescriptor(v_tile + (kk >> 2) * kVtBlockBytes<kD> + (kk & 3) * 32));
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads, 1)
    PrefillAttentionSm90Kernel(const __grid_constant__ PrefillAttentionParams p,
                               const uint8_t* __restrict__ k_ws, const uint8_t* __restrict__ vt_ws,
                               int tiles) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw_base + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  uint8_t* const smem = smem_raw + (base - raw_base);
  const uint32_t s_q = base;
  auto s_k = [&](int stage) { return base + (1 + 2 * stage) * kTileBytes<kD>; };
  auto s_v = [&](int stage) { return base + (2 + 2 * stage) * kTileBytes<kD>; };
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + (1 + 2 * kStages) * kTileBytes<kD>);
  uint64_t* empty = full + kStages;

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int num_tokens = static_cast<int>(p.num_tokens);
  const int num_q_tiles = (num_tokens + kBlockM - 1) / kBlockM;
  const int q_tile = num_q_tiles - 1 - static_cast<int>(blockIdx.x);  // heaviest first
  const int head = blockIdx.y;
  const int kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const int q_offset = static_cast<int>(p.q_offset);
  const int kv_len = q_offset + num_tokens;
  const int q0 = q_tile * kBlockM;
  const int kv_end = min(kv_len, q_offset + q0 + kBlockM);
  const int num_kv_tiles = (kv_end + kBlockN - 1) / kBlockN;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier::Init(&full[s], 1);                 // the loader's arrive + the copies' bytes
      mbarrier::Init(&empty[s], 4 * kWarpgroups);  // one arrive per consumer warp
    }
    mbarrier::FenceInit();
  }
  __syncthreads();

  // Tile j's K and V^T into its stage by the copy engine; full[stage] completes when both land.
  const int64_t first_tile = static_cast<int64_t>(kv_head) * tiles;
  auto load_tile = [&](int j) {
    const int stage = j % kStages;
    mbarrier::ArriveExpectBytes(&full[stage], 2 * kTileBytes<kD>);
    mbarrier::BulkCopy(s_k(stage), k_ws + (first_tile + j) * kTileBytes<kD>, kTileBytes<kD>,
                       &full[stage]);
    mbarrier::BulkCopy(s_v(stage), vt_ws + (first_tile + j) * kTileBytes<kD>, kTileBytes<kD>,
                       &full[stage]);
  };
  if (wg == kWarpgroups) {
    // The producer warpgroup: one thread issues every tile's copies once its stage is free. It
    // gives its registers to the consumers (FlashAttention-3's split): 12 warps share the 64K
    // registers, and a scheduler's 2 consumer warps and 1 producer warp fit its 16K only as
    // 2 x 240 + 24 a thread.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (tid == kConsumerThreads) {
      for (int j = 0; j < num_kv_tiles; ++j) {
        if (j >= kStages) mbarrier::Wait(&empty[j % kStages], ((j / kStages) & 1) ^ 1);
        load_tile(j);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");

  // Q rows q0 .. q0 + 127 of this head, rounded to bf16 (rows past the end are zeros).
  {
    const float* q_src = p.q + static_cast<int64_t>(head) * kD;
#pragma unroll 4
    for (int i = 0; i < kBlockM * kD / 4 / kConsumerThreads; ++i) {
      const int idx = tid + i * kConsumerThreads;
      const int row = idx / (kD / 4), c4 = idx % (kD / 4);
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (q0 + row < num_tokens) {
        v = __ldg(reinterpret_cast<const float4*>(q_src + (q0 + row) * p.q_row_stride) + c4);
      }
      *reinterpret_cast<uint2*>(smem + wgmma::SwizzledOffset(kBlockM, row, 4 * c4)) =
          make_uint2(PackBf16x2(v.x, v.y), PackBf16x2(v.z, v.w));
    }
    wgmma::FenceSharedForAsyncProxy();
    asm volatile("bar.sync %0, %1;\n" ::"n"(kConsumerBarrier), "n"(kConsumerThreads) : "memory");
  }

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};
  const float scale_log2 = p.sm_scale * 1.4426950408889634f;
  const int wg_row0 = q0 + 64 * wg;  // the warpgroup's first query row
  const int my_row[2] = {wg_row0 + 16 * warp + g, wg_row0 + 16 * warp + g + 8};
  const int my_pos[2] = {q_offset + my_row[0], q_offset + my_row[1]};
  const int wg_pos0 = q_offset + wg_row0;  // key position of the warpgroup's first row
  const bool wg_has_rows = wg_row0 < num_tokens;
  const uint32_t q_rows = s_q + static_cast<uint32_t>(wg) * 64 * 128;  // this warpgroup's rows

  // Turns: a warpgroup issues its products for a tile (S of tile j with P V of tile j - 1) only in
  // its turn, then hands the turn to the other warpgroup and runs the softmax of tile j while the
  // other's products use the tensor cores (named barriers 2 + wg: 128 threads wait, the other
  // warpgroup's 128 arrive). Warpgroup 0 takes the first turn.
  auto wait_turn = [&] {
    asm volatile("bar.sync %0, %1;\n" ::"r"(2 + wg), "n"(kConsumerThreads) : "memory");
  };
  auto pass_turn = [&] {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(3 - wg), "n"(kConsumerThreads) : "memory");
  };
  // Stage release: each consumer warp arrives once per tile, after its last product on the tile.
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) mbarrier::Arrive(&empty[stage]);
  };

  float s[64];
  // P of the previous tile, the A operand of its P V; zero before the first tile, so that the
  // first turn's P V adds exact zeros (no branch around a product: see below).
  uint32_t pa[kBlockN / 16][4];
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
  int prev_stage = 0;
  if (wg == 1) pass_turn();
  for (int j = 0; j < num_kv_tiles; ++j) {
    const int stage = j % kStages;
    mbarrier::Wait(&full[stage], (j / kStages) & 1);  // tile j's K and V^T have landed
    const int kv0 = j * kBlockN;
    // Warpgroup-uniform: some key of this tile is visible to some row of this warpgroup.
    const bool active = wg_has_rows && kv0 <= wg_pos0 + 63;

    // The products are issued whatever `active` says and on every tile: a product under a branch
    // made ptxas serialise all of them (wgmma wants control flow it can see is warpgroup-uniform).
    // An inactive tile's S is masked whole below.
    PinRegisters(pa);
    PinRegisters(o);
    wait_turn();
    wgmma::Fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t off = (ks >> 2) * kQkBlockBytes + (ks & 3) * 32;
      wgmma::MmaSS(s, wgmma::SmemDescriptor(q_rows + off), wgmma::SmemDescriptor(s_k(stage) + off),
                   ks > 0);
    }
    wgmma::Commit();
    IssuePv<kD>(o, pa, s_v(prev_stage));
    wgmma::Commit();
    // Warpgroup 1 keeps its last turn: every turn taken is then matched by one passed to it.
    if (wg == 0 || j + 1 < num_kv_tiles) pass_turn();
    wgmma::Wait<1>();  // S (the older group) is done; P V of tile j - 1 may still run
    PinRegisters(s);

    // Causal and length mask, only on tiles that reach past the warpgroup's first row or the end;
    // a tile the warpgroup does not see at all is masked whole, which makes the softmax below an
    // exact no-op for it (alpha 1, P 0).
    if (!active || kv0 + kBlockN - 1 > wg_pos0 || kv0 + kBlockN > kv_len) {
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = kv0 + 8 * n + 2 * t4 + (e & 1);
          if (!active || col > my_pos[e >> 1] || col >= kv_len) s[4 * n + e] = -INFINITY;
        }
      }
    }
    // Online softmax over the two rows this thread holds (row g: e = 0, 1; row g + 8: e = 2, 3),
    // with the mma.sync kernel's rules for rows that see nothing yet. After the wait below, O
    // holds P V of every tile before j: rescaling it then and adding P V of tile j in the next
    // turn is the mma.sync kernel's order of operations.
    float alpha[2];
    SoftmaxTileRows<kBlockN, true>(s, row_max, row_sum, scale_log2, alpha);
    // P V of tile j - 1 done: O complete up to tile j - 1; pa and that stage are free.
    wgmma::Wait<0>();
    PinRegisters(o);
    if (j > 0) release(prev_stage);
    prev_stage = stage;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      o[4 * n + 0] *= alpha[0];
      o[4 * n + 1] *= alpha[0];
      o[4 * n + 2] *= alpha[1];
      o[4 * n + 3] *= alpha[1];
    }
    // P (bf16) as the register A operand of the next turn's P V, 16 keys per k-step.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      pa[kk][0] = PackBf16x2(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = PackBf16x2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = PackBf16x2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = PackBf16x2(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }
  // P V of the last tile (num_kv_tiles >= 1: the launcher runs only with num_tokens >= 1).
  PinRegisters(pa);
  PinRegisters(o);
  wgmma::Fence();
  IssuePv<kD>(o, pa, s_v(prev_stage));
  wgmma::Commit();
  wgmma::Wait<0>();
  PinRegisters(o);
  release(prev_stage);

  StoreNormalisedRows<kD>(o, row_sum, my_row, num_tokens, p, head, t4);
}

}  // namespace

int64_t PrefillAttentionWorkspaceBytes(const PrefillAttentionParams& p) {
  if ((p.head_dim != 64 && p.head_dim != 128) || p.num_kv_heads <= 0 || p.num_tokens < 0 ||
      p.q_offset < 0) {
    return 0;
  }
  return 2 * static_cast<int64_t>(p.num_kv_heads) * PaddedKeys(p.q_offset + p.num_tokens) *
         p.head_dim * static_cast<int64_t>(sizeof(uint16_t));
}

namespace {

template <int kD>
cudaError_t LaunchSm90(const PrefillAttentionParams& p, cudaStream_t stream) {
  const int64_t kv_len = p.q_offset + p.num_tokens;
  const int64_t kv_pad = PaddedKeys(kv_len);
  const int tiles = static_cast<int>(kv_pad / kBlockN);  // per KV head
  auto* k_ws = static_cast<uint8_t*>(p.workspace);
  uint8_t* vt_ws = k_ws + static_cast<int64_t>(p.num_kv_heads) * tiles * kTileBytes<kD>;
  const dim3 stage_grid(static_cast<unsigned>(kv_pad / kStageKeys),
                        static_cast<unsigned>(p.num_kv_heads));
  StageKvKernel<kD>
      <<<stage_grid, 256, 0, stream>>>(p, static_cast<int>(kv_len), tiles, k_ws, vt_ws);
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      PrefillAttentionSm90Kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes<kD>));
  const int64_t q_tiles = (p.num_tokens + kBlockM - 1) / kBlockM;
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(p.num_q_heads));
  PrefillAttentionSm90Kernel<kD><<<grid, kThreads, kSmemBytes<kD>, stream>>>(p, k_ws, vt_ws, tiles);
  return cudaGetLastError();
}

}  // namespace

cudaError_t PrefillAttentionSm90(const PrefillAttentionParams& p, cudaStream_t stream) {
  return p.head_dim == 64 ? LaunchSm90<64>(p, stream) : LaunchSm90<128>(p, stream);
}

}  // namespace oscarkv::kernels
