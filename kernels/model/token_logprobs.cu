// TokenLogprobsRowsCuda (model_kernels_cuda.h): the log-softmax of each logits row at one token,
// its rank and the most likely alternatives, so that scoring a prompt on the GPU copies a few
// numbers a row to the host instead of the whole row (49,152 floats for the default model).
//
// Same definitions as engine::ComputeLogprobs (lib/engine/logprobs.cc), the CPU path and the
// reference: non-finite logits count as -inf; max and the rank's comparisons are exact, so rank
// and the top list's ids match the CPU's exactly; the normaliser sums expf of (x - max) in double
// (the CPU sums Eigen's packet exp in float over blocks of 512, the blocks in double), so the
// logprobs differ by float rounding only.
//
// One block per row. Pass 1: max and the count of logits above the token's; pass 2: Σ exp; then
// one pass per top entry, each the best element after the previous pick in (logit desc, id asc)
// order. A 20-entry list reads the row 22 times; the row (196 KB) is read from L2 after the
// first pass, and rows are few (a prefill chunk), so this stays well under the lm head's cost.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/model/model_kernels_cuda.h"

namespace oscarkv::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxTop = 20;

__device__ __forceinline__ float FiniteOr(float x) { return isfinite(x) ? x : -INFINITY; }

// Calls f(value, index) for every element of row x, float4 loads when kVec.
template <bool kVec, typename F>
__device__ __forceinline__ void ForRow(const float* __restrict__ x, int vocab, F&& f) {
  if constexpr (kVec) {
    for (int i = threadIdx.x; i < vocab / 4; i += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      f(FiniteOr(v.x), 4 * i);
      f(FiniteOr(v.y), 4 * i + 1);
      f(FiniteOr(v.z), 4 * i + 2);
      f(FiniteOr(v.w), 4 * i + 3);
    }
  } else {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) f(FiniteOr(x[i]), i);
  }
}

// (v, i) comes before (bv, bi) in the top list's order.
__device__ __forceinline__ bool Before(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// Block-wide reductions (every thread gets the result). `scratch` holds 32 entries.
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // scratch may still be read from the previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = op(v, scratch[w]);
  return v;
}

struct Pick {
  float v;
  int i;
};

__device__ Pick BlockBest(Pick p, Pick* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Pick q{__shfl_xor_sync(0xffffffffu, p.v, o), __shfl_xor_sync(0xffffffffu, p.i, o)};
    if (Before(q.v, q.i, p.v, p.i)) p = q;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = p;
  __syncthreads();
  p = scratch[0];
  for (int w = 1; w < warps; ++w) {
    if (Before(scratch[w].v, scratch[w].i, p.v, p.i)) p = scratch[w];
  }
  return p;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TokenLogprobsRowsKernel(const float* __restrict__ logits, int vocab,
                            const int32_t* __restrict__ tokens, int top_n,
                            float* __restrict__ logprob_out, int32_t* __restrict__ rank_out,
                            int32_t* __restrict__ top_ids, float* __restrict__ top_logprobs) {
  __shared__ float s_float[32];
  __shared__ int s_int[32];
  __shared__ double s_double[32];
  __shared__ Pick s_pick[32];
  const int row = blockIdx.x;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const int token = tokens[row];
  const float mine = FiniteOr(x[token]);

  float max = -INFINITY;
  int greater = 0;
  ForRow<kVec>(x, vocab, [&](float v, int) {
    max = fmaxf(max, v);
    greater += v > mine;
  });
  max = BlockReduce(max, [](float a, float b) { return fmaxf(a, b); }, s_float);
  greater = BlockReduce(greater, [](int a, int b) { return a + b; }, s_int);

  // With every logit -inf the distribution is undefined: -inf everywhere, as on the CPU.
  double log_z = INFINITY;
  if (isfinite(max)) {
    double sum = 0;
    ForRow<kVec>(x, vocab, [&](float v, int) { sum += static_cast<double>(expf(v - max)); });
    sum = BlockReduce(sum, [](double a, double b) { return a + b; }, s_double);
    log_z = static_cast<double>(max) + log(sum);
  }
  if (threadIdx.x == 0) {
    logprob_out[row] = static_cast<float>(static_cast<double>(mine) - log_z);
    rank_out[row] = 1 + greater;
  }

  Pick last{INFINITY, -1};  // every element comes after it
  for (int j = 0; j < top_n; ++j) {
    Pick best{-INFINITY, INT_MAX};
    ForRow<kVec>(x, vocab, [&](float v, int i) {
      if (Before(last.v, last.i, v, i) && Before(v, i, best.v, best.i)) best = {v, i};
    });
    best = BlockBest(best, s_pick);
    if (threadIdx.x == 0) {
      top_ids[static_cast<int64_t>(row) * top_n + j] = best.i;
      top_logprobs[static_cast<int64_t>(row) * top_n + j] =
          static_cast<float>(static_cast<double>(best.v) - log_z);
    }
    last = best;
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

cudaError_t TokenLogprobsRowsCuda(const float* logits, int rows, int vocab, const int32_t* tokens,
                                  int top_n, float* logprob_out, int32_t* rank_out,
                                  int32_t* top_ids, float* top_logprobs, cudaStream_t stream) {
  if (rows < 0 || vocab <= 0 || top_n < 0 || top_n > kMaxTop || top_n > vocab) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  if (logits == nullptr || tokens == nullptr || logprob_out == nullptr || rank_out == nullptr ||
      (top_n > 0 && (top_ids == nullptr || top_logprobs == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (vocab % 4 == 0 && Aligned16(logits)) {
    TokenLogprobsRowsKernel<true><<<rows, kThreads, 0, stream>>>(
        logits, vocab, tokens, top_n, logprob_out, rank_out, top_ids, top_logprobs);
  } else {
    TokenLogprobsRowsKernel<false><<<rows, kThreads, 0, stream>>>(
        logits, vocab, tokens, top_n, logprob_out, rank_out, top_ids, top_logprobs);
  }
  return cudaGetLastError();
}

}  // namespace oscarkv::kernels
