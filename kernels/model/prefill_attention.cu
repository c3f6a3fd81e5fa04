// Causal BF16 prefill attention on tensor cores (PrefillAttentionCuda, model_kernels_cuda.h), in
// the FlashAttention-2 shape (callers that pass a workspace get the Hopper kernel of
// prefill_attention_sm90.cu instead, 2.2-3.0x faster on the H200 in the same runs,
// bench/kernels/RESULTS.md "Prefill attention"; this one stays for calls without one and as its
// baseline): one block of 8 warps owns 128 query rows of one query head (16 rows per warp) and
// walks the key tiles of 64 tokens from 0 to its diagonal with an online softmax; S = Q K^T and
// O += P V run as mma.sync m16n8k16 bf16 with f32 accumulators.
//
// Query offset (chunked prefill): with q_offset > 0 the T query rows sit at positions
// q_offset .. q_offset + T - 1 and the keys span 0 .. q_offset + T - 1, so a query tile's key walk
// runs to its own diagonal q_offset + q0 + kBlockM and the causal mask compares key positions with
// q_offset + row. Query tiles, Q loads and outputs stay over the T query rows.
//
// Q, K and V arrive as f32 rows with strides (the fused QKV GEMM output), so they cannot be
// cp.async'ed into shared memory as MMA operands: each thread loads its share of the next K tile
// (float4) into registers before the S products of the current tile and stores it, rounded to bf16,
// into the other half of a double buffer afterwards; the next V tile likewise around the softmax
// and the P V products. One __syncthreads per key tile. Shared tiles are [rows][D] bf16 with the
// 16-byte chunks of a row XOR-swizzled by (row & 7), so the ldmatrix reads are conflict free.
//
// GQA: query head h reads KV head h / (Hq / Hkv). Blocks are ordered heaviest (last query tile)
// first, and the query tiles of one head are adjacent in launch order so concurrent blocks stream
// the same K/V rows through L2.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/model/model_kernels_cuda.h"
#include "kernels/model/prefill_attention_rows.cuh"
#include "kernels/model/prefill_attention_sm90.h"

namespace oscarkv::kernels {
namespace {

using cuda::MmaBf16;
using cuda::PackBf16x2;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = 16 * kWarps;  // query rows per block
constexpr int kBlockN = 64;           // keys per tile

template <int kHeadDim>
constexpr int SmemBytes() {
  return (kBlockM + 4 * kBlockN) * kHeadDim * 2;  // Q + 2 x K + 2 x V, bf16
}

// Element offset of (row, col) in a swizzled [rows][kHeadDim] bf16 tile; col % 8 may be != 0
// (inside one 16-byte chunk).
template <int kHeadDim>
__device__ __forceinline__ int Swz(int row, int col) {
  return row * kHeadDim + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const uint16_t* p) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const uint16_t* p) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// A [rows][kHeadDim] f32 tile in flight: thread tid holds float4 number tid + i * kThreads of the
// tile (row-major, kHeadDim / 4 float4 per row).
template <int kRows, int kHeadDim>
struct TileRegs {
  static constexpr int kPerRow = kHeadDim / 4;
  static constexpr int kCount = kRows * kPerRow / kThreads;
  static_assert(kRows * kPerRow % kThreads == 0);
  float4 v[kCount];

  // Rows row0.. of `src` (row stride `stride` floats); rows >= limit read as zero.
  __device__ __forceinline__ void Load(const float* __restrict__ src, int64_t stride, int row0,
                                       int limit) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int row = idx / kPerRow, c4 = idx % kPerRow;
      v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row0 + row < limit) {
        v[i] = __ldg(reinterpret_cast<const float4*>(src + (row0 + row) * stride) + c4);
      }
    }
  }
  __device__ __forceinline__ void Store(uint16_t* tile) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int row = idx / kPerRow, c4 = idx % kPerRow;
      *reinterpret_cast<uint2*>(tile + Swz<kHeadDim>(row, 4 * c4)) =
          make_uint2(PackBf16x2(v[i].x, v[i].y), PackBf16x2(v[i].z, v[i].w));
    }
  }
};

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads, 1)
    PrefillAttentionKernel(const __grid_constant__ PrefillAttentionParams p) {
  constexpr int kDSteps = kHeadDim / 16;  // k-steps of S = Q K^T
  constexpr int kDTiles = kHeadDim / 8;   // n-tiles of O
  constexpr int kNTiles = kBlockN / 8;    // n-tiles of S
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* s_q = smem;
  uint16_t* s_k = s_q + kBlockM * kHeadDim;  // [2][kBlockN][kHeadDim]
  uint16_t* s_v = s_k + 2 * kBlockN * kHeadDim;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int num_q_tiles = static_cast<int>((p.num_tokens + kBlockM - 1) / kBlockM);
  const int q_tile = num_q_tiles - 1 - static_cast<int>(blockIdx.x);
  const int head = blockIdx.y;
  const int kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const int num_tokens = static_cast<int>(p.num_tokens);  // query rows
  const int q_offset = static_cast<int>(p.q_offset);      // position of query row 0
  const int kv_len = q_offset + num_tokens;               // key rows
  const int q0 = q_tile * kBlockM;
  const int kv_end = min(kv_len, q_offset + q0 + kBlockM);
  const int num_kv_tiles = (kv_end + kBlockN - 1) / kBlockN;

  const float* k_src = p.k + static_cast<int64_t>(kv_head) * kHeadDim;
  const float* v_src = p.v + static_cast<int64_t>(kv_head) * kHeadDim;

  // Q tile, then the first K and V tiles.
  {
    TileRegs<kBlockN, kHeadDim> q_part;
    const float* q_src = p.q + static_cast<int64_t>(head) * kHeadDim;
#pragma unroll
    for (int part = 0; part < kBlockM / kBlockN; ++part) {
      q_part.Load(q_src, p.q_row_stride, q0 + part * kBlockN, num_tokens);
      q_part.Store(s_q + part * kBlockN * kHeadDim);
    }
  }
  TileRegs<kBlockN, kHeadDim> next;
  next.Load(k_src, p.k_row_stride, 0, kv_len);
  next.Store(s_k);
  next.Load(v_src, p.v_row_stride, 0, kv_len);
  next.Store(s_v);
  __syncthreads();

  // This warp's Q fragments (A operand), rows warp_row0 .. +15.
  const int warp_row0 = q0 + 16 * warp;
  uint32_t q_frag[kDSteps][4];
  {
    const int row = 16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int ks = 0; ks < kDSteps; ++ks) {
      LdMatrixX4(q_frag[ks], s_q + Swz<kHeadDim>(row, 16 * ks + 8 * (lane >> 4)));
    }
  }

  float o[kDTiles][4];
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};
  const float scale_log2 = p.sm_scale * 1.4426950408889634f;
  const int my_row[2] = {warp_row0 + g, warp_row0 + g + 8};  // query rows (output rows)
  const int warp_pos0 = q_offset + warp_row0;                // key position of warp_row0
  const int my_pos[2] = {q_offset + my_row[0], q_offset + my_row[1]};
  const bool warp_has_rows = warp_row0 < num_tokens;

  for (int j = 0; j < num_kv_tiles; ++j) {
    const int buf = j & 1;
    const int kv0 = j * kBlockN;
    const bool has_next = j + 1 < num_kv_tiles;
    const uint16_t* k_tile = s_k + buf * kBlockN * kHeadDim;
    const uint16_t* v_tile = s_v + buf * kBlockN * kHeadDim;
    // Warp-uniform: some key of this tile is visible to some row of this warp.
    const bool active = warp_has_rows && kv0 <= warp_pos0 + 15;

    if (has_next) next.Load(k_src, p.k_row_stride, kv0 + kBlockN, kv_len);

    float s[kNTiles][4];
    if (active) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kDSteps; ++ks) {
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
          uint32_t b[4];
          const int key = 16 * np + (lane & 7) + 8 * (lane >> 4);
          LdMatrixX4(b, k_tile + Swz<kHeadDim>(key, 16 * ks + 8 * ((lane >> 3) & 1)));
          MmaBf16(s[2 * np], q_frag[ks], b[0], b[1]);
          MmaBf16(s[2 * np + 1], q_frag[ks], b[2], b[3]);
        }
      }
    }

    if (has_next) {
      next.Store(s_k + (buf ^ 1) * kBlockN * kHeadDim);
      next.Load(v_src, p.v_row_stride, kv0 + kBlockN, kv_len);
    }

    if (active) {
      // Causal and length mask, only on tiles that reach past this warp's first row or the end.
      if (kv0 + kBlockN - 1 > warp_pos0 || kv0 + kBlockN > kv_len) {
#pragma unroll
        for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = kv0 + 8 * n + 2 * t4 + (e & 1);
            const int pos = my_pos[e >> 1];
            if (col > pos || col >= kv_len) s[n][e] = -INFINITY;
          }
        }
      }
      // Online softmax over the two rows this thread holds (row g: e = 0, 1; row g + 8: e = 2, 3).
      // With q_offset % 16 != 0 a warp's rows can straddle a tile start, so a row may see nothing
      // of an active tile; SoftmaxTileRows makes that an exact no-op. With q_offset = 0 every
      // active tile shows key kv0 to every row.
      float alpha[2];
      SoftmaxTileRows<kBlockN, false>(&s[0][0], row_max, row_sum, scale_log2, alpha);
#pragma unroll
      for (int n = 0; n < kDTiles; ++n) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
      }
      // O += P V: P (bf16) is the A operand straight from the S accumulators.
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[4];
        a[0] = PackBf16x2(s[2 * kk][0], s[2 * kk][1]);
        a[1] = PackBf16x2(s[2 * kk][2], s[2 * kk][3]);
        a[2] = PackBf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = PackBf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const int key = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
        for (int np = 0; np < kDTiles / 2; ++np) {
          uint32_t b[4];
          LdMatrixX4Trans(b, v_tile + Swz<kHeadDim>(key, 16 * np + 8 * (lane >> 4)));
          MmaBf16(o[2 * np], a, b[0], b[1]);
          MmaBf16(o[2 * np + 1], a, b[2], b[3]);
        }
      }
    }

    if (has_next) next.Store(s_v + (buf ^ 1) * kBlockN * kHeadDim);
    __syncthreads();
  }

  StoreNormalisedRows<kHeadDim>(&o[0][0], row_sum, my_row, num_tokens, p, head, t4);
}

template <int kHeadDim>
cudaError_t LaunchPrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr int kSmem = SmemBytes<kHeadDim>();
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      PrefillAttentionKernel<kHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int64_t q_tiles = (p.num_tokens + kBlockM - 1) / kBlockM;
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(p.num_q_heads));
  PrefillAttentionKernel<kHeadDim><<<grid, kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

cudaError_t PrefillAttentionCuda(const PrefillAttentionParams& params, cudaStream_t stream) {
  const PrefillAttentionParams& p = params;
  // The kernel indexes key rows (q_offset + num_tokens, plus one tile's slack) in int.
  if (p.num_tokens < 0 || p.q_offset < 0 || p.num_tokens > INT_MAX - kBlockM ||
      p.q_offset > INT_MAX - kBlockM - p.num_tokens) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out_bf16 == nullptr ||
      p.num_q_heads <= 0 || p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 ||
      p.num_q_heads > 65535 || !(p.sm_scale > 0.0f)) {
    return cudaErrorInvalidValue;
  }
  // float4 loads of q/k/v rows and 4-byte output stores.
  if (!Aligned16(p.q) || !Aligned16(p.k) || !Aligned16(p.v) || p.q_row_stride % 4 != 0 ||
      p.k_row_stride % 4 != 0 || p.v_row_stride % 4 != 0 ||
      (reinterpret_cast<uintptr_t>(p.out_bf16) & 3u) != 0) {
    return cudaErrorInvalidValue;
  }
  switch (p.head_dim) {
    case 64:
    case 128:
      if (p.workspace != nullptr && Aligned16(p.workspace) &&
          p.workspace_bytes >= PrefillAttentionWorkspaceBytes(p)) {
        return PrefillAttentionSm90(p, stream);
      }
      return p.head_dim == 64 ? LaunchPrefillAttention<64>(p, stream)
                              : LaunchPrefillAttention<128>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace oscarkv::kernels
