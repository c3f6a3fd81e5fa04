// RotateRowsCuda: rows times a D x D rotation, bit-identical to RotateRowsRef (ascending sum,
// separate round-to-nearest multiply and add: no FMA contraction). Several rotations may share
// one launch (a prefill rotates K by R_K and V by R_V together: one kernel's latency less per
// layer), and the results may be rounded to bf16 on the way out (a decode step's output by R_Vᵀ
// for W_o). A decode step's q, K and V are rotated inside QkvPostCuda's launch instead.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/model/model_kernels_cuda.h"

namespace oscarkv::kernels {
namespace {

// Rows per block: 8 when there are many rows (R's shared-memory copy shared by more rows), fewer
// when a launch has few rows (a decode step: 8-32 rows at batch 1), so that they spread over
// about kTargetBlocks SMs instead of running 8 deep on a few (the sum over i is a chain of D
// dependent adds per row, the same in any block).
constexpr int kMaxRowsPerBlock = 8;
constexpr int64_t kTargetBlocks = 128;

// The jobs of one launch: job j takes blocks [first_block[j], first_block[j + 1]).
struct RotateJobs {
  RotateRowsParams job[kMaxRotateJobs];
  int64_t first_block[kMaxRotateJobs + 1];
  int count;
};

// Block: D threads, one output column each, for kRows rows. R (64 KB at D = 128) is first
// copied to shared memory with all its loads in flight at once: in a decode step R is cold (the
// weights stream evicts it from L2) and there are only a few blocks, so streaming R's column
// term by term would pay one DRAM round trip per batch of terms (~20 us per call, measured).
// The rows sit in shared memory too; ascending i per output keeps the CPU's summation order.
template <int D, int kRows>
__global__ void RotateRowsKernel(const __grid_constant__ RotateJobs jobs) {
  extern __shared__ float4 smem4[];
  float* rs = reinterpret_cast<float*>(smem4);  // [D][D]
  float* xs = rs + D * D;                         // [kRows][D]
  cuda::AllowDependentLaunch();  // chained (StartChainedKernel), R staged before the wait
  int job = 0;
  while (job + 1 < jobs.count && blockIdx.x >= jobs.first_block[job + 1]) ++job;
  const RotateRowsParams& p = jobs.job[job];
  const int j = threadIdx.x;
  const float4* r4 = reinterpret_cast<const float4*>(p.rotation);
#pragma unroll 8
  for (int i = j; i < D * D / 4; i += D) smem4[i] = __ldg(r4 + i);
  cuda::WaitForPriorGrid();  // R is a weight; the rows may be the kernel before's output
  const int64_t total = p.tokens * p.heads;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) - jobs.first_block[job]) * kRows;
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = row0 + r;
    float v = 0.0f;
    if (row < total) {
      const int64_t t = row / p.heads;
      const int h = static_cast<int>(row % p.heads);
      v = p.in[t * p.in_token_stride + static_cast<int64_t>(h) * D + j];
    }
    xs[r * D + j] = v;
  }
  __syncthreads();
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
#pragma unroll 4
  for (int i = 0; i < D; ++i) {
    const float w = rs[i * D + j];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = __fadd_rn(acc[r], __fmul_rn(xs[r * D + i], w));
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = row0 + r;
    if (row >= total) continue;
    if (p.out_bf16 != nullptr) {
      p.out_bf16[row * D + j] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[r]));
    } else {
      p.out[row * D + j] = acc[r];
    }
  }
}

template <int D, int kRows>
cudaError_t LaunchRotateRows(const RotateJobs& jobs, cudaStream_t stream) {
  constexpr int kSmem = (D * D + kRows * D) * static_cast<int>(sizeof(float));
  static const cudaError_t attr = cudaFuncSetAttribute(
      RotateRowsKernel<D, kRows>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  return cuda::LaunchOverlappingPrior(RotateRowsKernel<D, kRows>,
                                      dim3(static_cast<unsigned>(jobs.first_block[jobs.count])),
                                      dim3(D), kSmem, stream, jobs);
}

template <int D>
cudaError_t LaunchRotateRows(const RotateJobs& jobs, int rows_per_block, cudaStream_t stream) {
  switch (rows_per_block) {
    case 1: return LaunchRotateRows<D, 1>(jobs, stream);
    case 2: return LaunchRotateRows<D, 2>(jobs, stream);
    case 4: return LaunchRotateRows<D, 4>(jobs, stream);
    default: return LaunchRotateRows<D, kMaxRowsPerBlock>(jobs, stream);
  }
}

}  // namespace

cudaError_t RotateRowsCuda(const RotateRowsParams* params, int num_jobs, cudaStream_t stream) {
  if (num_jobs < 1 || num_jobs > kMaxRotateJobs || params == nullptr) return cudaErrorInvalidValue;
  RotateJobs jobs{};
  int64_t job_rows[kMaxRotateJobs] = {};
  int64_t all_rows = 0;
  for (int i = 0; i < num_jobs; ++i) {
    const RotateRowsParams& p = params[i];
    if (p.tokens < 0 || p.heads <= 0 || p.in == nullptr ||
        (p.out == nullptr) == (p.out_bf16 == nullptr) || p.rotation == nullptr ||
        p.in_token_stride < static_cast<int64_t>(p.heads) * p.head_dim) {
      return cudaErrorInvalidValue;
    }
    if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
    if (p.head_dim != params[0].head_dim) return cudaErrorInvalidValue;
    if (reinterpret_cast<uintptr_t>(p.rotation) % 16 != 0) return cudaErrorInvalidValue;
    const int64_t rows = p.tokens * p.heads;
    if (rows == 0) continue;  // nothing to do: leave it out of the launch
    job_rows[jobs.count] = rows;
    jobs.job[jobs.count++] = p;
    all_rows += rows;
  }
  if (jobs.count == 0) return cudaSuccess;
  int rows_per_block = 1;
  while (rows_per_block < kMaxRowsPerBlock &&
         (all_rows + rows_per_block - 1) / rows_per_block > kTargetBlocks) {
    rows_per_block *= 2;
  }
  jobs.first_block[0] = 0;
  for (int i = 0; i < jobs.count; ++i) {
    jobs.first_block[i + 1] =
        jobs.first_block[i] + (job_rows[i] + rows_per_block - 1) / rows_per_block;
  }
  if (jobs.first_block[jobs.count] > 0x7fffffff) return cudaErrorInvalidValue;
  return params[0].head_dim == 128 ? LaunchRotateRows<128>(jobs, rows_per_block, stream)
                                   : LaunchRotateRows<64>(jobs, rows_per_block, stream);
}

cudaError_t RotateRowsCuda(const RotateRowsParams& p, cudaStream_t stream) {
  return RotateRowsCuda(&p, 1, stream);
}

}  // namespace oscarkv::kernels
