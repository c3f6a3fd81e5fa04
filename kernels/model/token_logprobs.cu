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
// One block per row, two passes over it. Pass 1: max, the count of logits above the token's, and
// each thread's best element in the top list's order (logit desc, id asc). The top_n-th best of
// those thread bests, T, comes at or after the row's top_n-th best element (the top_n thread bests
// before it are distinct elements), so the top list lies among the elements at or before T. Pass 2:
// Σ exp, and those elements into shared memory (how many depends on the row; nothing bounds it);
// one warp then picks the list from them. When they do not fit (the row's best values crowd a few
// threads' strides), or fewer than top_n threads hold an element, the list is taken as it was
// before: one pass over the row per entry (kPassPerEntry, kept for that and as the bench's
// baseline).
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

// The best entry after `last` among n shared-memory candidates, by warp 0 alone (no block
// barrier); every lane of the warp gets it.
__device__ Pick WarpBestAfter(const float* v, const int* id, int n, Pick last) {
  Pick best{-INFINITY, INT_MAX};
  for (int k = threadIdx.x; k < n; k += 32) {
    if (Before(last.v, last.i, v[k], id[k]) && Before(v[k], id[k], best.v, best.i)) {
      best = {v[k], id[k]};
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Pick q{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
    if (Before(q.v, q.i, best.v, best.i)) best = q;
  }
  return best;
}

// Candidates kept for the one-warp pick (8 bytes each; >= kThreads, the thread bests use them
// first). 19 threads' strides full of the best values (19 x 96 at the default vocabulary, the
// test's crowded row) overflow it.
constexpr int kCandidates = 1024;
static_assert(kCandidates >= kThreads);

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TokenLogprobsRowsKernel(const float* __restrict__ logits, int vocab,
                            const int32_t* __restrict__ tokens, int top_n, bool pass_per_entry,
                            float* __restrict__ logprob_out, int32_t* __restrict__ rank_out,
                            int32_t* __restrict__ top_ids, float* __restrict__ top_logprobs) {
  __shared__ float s_float[32];
  __shared__ int s_int[32];
  __shared__ double s_double[32];
  __shared__ Pick s_pick[32];
  __shared__ float s_cand_v[kCandidates];  // first the thread bests, then the candidates
  __shared__ int s_cand_i[kCandidates];
  __shared__ Pick s_bound;
  __shared__ int s_count;
  const int row = blockIdx.x;
  const float* x = logits + static_cast<int64_t>(row) * vocab;
  const int token = tokens[row];
  const float mine = FiniteOr(x[token]);
  const bool select = top_n > 0 && !pass_per_entry;

  float max = -INFINITY;
  int greater = 0;
  Pick own{-INFINITY, INT_MAX};  // this thread's best; INT_MAX: it holds no element
  ForRow<kVec>(x, vocab, [&](float v, int i) {
    max = fmaxf(max, v);
    greater += v > mine;
    if (Before(v, i, own.v, own.i)) own = {v, i};
  });
  if (select) {
    s_cand_v[threadIdx.x] = own.v;
    s_cand_i[threadIdx.x] = own.i;
  }
  max = BlockReduce(max, [](float a, float b) { return fmaxf(a, b); }, s_float);
  greater = BlockReduce(greater, [](int a, int b) { return a + b; }, s_int);  // barriers: s_cand
  if (select && threadIdx.x < 32) {
    Pick bound{INFINITY, -1};  // every element comes after it
    for (int j = 0; j < top_n; ++j) bound = WarpBestAfter(s_cand_v, s_cand_i, kThreads, bound);
    if (threadIdx.x == 0) {
      s_bound = bound;
      s_count = 0;
    }
  }
  __syncthreads();
  // INT_MAX: fewer than top_n threads hold an element (a short row).
  const Pick bound = select ? s_bound : Pick{};
  const bool collect = select && bound.i != INT_MAX;

  // With every logit -inf the distribution is undefined: -inf everywhere, as on the CPU.
  double log_z = INFINITY;
  double sum = 0;
  if (isfinite(max) || collect) {
    ForRow<kVec>(x, vocab, [&](float v, int i) {
      sum += static_cast<double>(expf(v - max));
      if (collect && !Before(bound.v, bound.i, v, i)) {
        const int k = atomicAdd(&s_count, 1);
        if (k < kCandidates) {
          s_cand_v[k] = v;
          s_cand_i[k] = i;
        }
      }
    });
  }
  if (isfinite(max)) {
    sum = BlockReduce(sum, [](double a, double b) { return a + b; }, s_double);
    log_z = static_cast<double>(max) + log(sum);
  }
  if (threadIdx.x == 0) {
    logprob_out[row] = static_cast<float>(static_cast<double>(mine) - log_z);
    rank_out[row] = 1 + greater;
  }
  __syncthreads();  // the candidates and their count
  auto write = [&](int j, Pick p) {
    top_ids[static_cast<int64_t>(row) * top_n + j] = p.i;
    top_logprobs[static_cast<int64_t>(row) * top_n + j] =
        static_cast<float>(static_cast<double>(p.v) - log_z);
  };

  if (collect && s_count <= kCandidates) {
    if (threadIdx.x < 32) {
      Pick last{INFINITY, -1};
      for (int j = 0; j < top_n; ++j) {
        last = WarpBestAfter(s_cand_v, s_cand_i, s_count, last);
        if (threadIdx.x == 0) write(j, last);
      }
    }
    return;
  }
  Pick last{INFINITY, -1};
  for (int j = 0; j < top_n; ++j) {
    Pick best{-INFINITY, INT_MAX};
    ForRow<kVec>(x, vocab, [&](float v, int i) {
      if (Before(last.v, last.i, v, i) && Before(v, i, best.v, best.i)) best = {v, i};
    });
    best = BlockBest(best, s_pick);
    if (threadIdx.x == 0) write(j, best);
    last = best;
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

cudaError_t TokenLogprobsRowsCuda(const float* logits, int rows, int vocab, const int32_t* tokens,
                                  int top_n, float* logprob_out, int32_t* rank_out,
                                  int32_t* top_ids, float* top_logprobs, cudaStream_t stream,
                                  TopListMethod method) {
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
        logits, vocab, tokens, top_n, method == TopListMethod::kPassPerEntry, logprob_out, rank_out,
        top_ids, top_logprobs);
  } else {
    TokenLogprobsRowsKernel<false><<<rows, kThreads, 0, stream>>>(
        logits, vocab, tokens, top_n, method == TopListMethod::kPassPerEntry, logprob_out, rank_out,
        top_ids, top_logprobs);
  }
  return cudaGetLastError();
}

}  // namespace oscarkv::kernels
