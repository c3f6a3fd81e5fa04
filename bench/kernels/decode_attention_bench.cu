// Decode attention and demotion timings on the GPU (bench/kernels/RESULTS.md has the numbers).
// Every case: fresh device-filled pools with shuffled pages, enough copies of the inputs that one
// timed graph reads more than 4x the L2, a CUDA graph of `copies` calls replayed many times (10
// back to back per timed interval), the median interval divided by 10 x `copies`. The HBM floor
// is (bytes that must be read) / (measured device-to-device copy bandwidth, bytes read + written,
// the best of three ways: CopyBandwidth).
// Calls set overlap_prior_kernel (rows marked "plain launch" do not; DecodeAttentionCuda uses it
// for few sequences only). Rows marked "read only" time a kernel that only reads the same pools,
// one launch per call: the ceiling of a single launch of that size, next to the floor.
// Modes (the grid, --only, --demote, --cap-sweep): `decode_attention_bench --help`, i.e. kUsage
// below; arguments are checked before any GPU work, and bad ones exit 2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_attention_cuda.h"
#include "kernels/quant/kv_quant_cuda.h"
#include "tests/kernels/gpu_test_util.h"

namespace {

using oscarkv::kernels::DecodeAttentionParams;
using oscarkv::kernels::kPageTokens;

__device__ uint32_t Hash(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
// BF16 pool: every u16 a bf16 value in [-2, 2). INT2 pool: random code bytes, then every params
// slot a valid (scale, min).
__global__ void FillBf16(uint16_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = (Hash(seed + i) & 0xffffff) * (4.0f / 16777216.0f) - 2.0f;
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}
__global__ void FillInt2(uint8_t* p, int64_t units, int unit, int d, uint64_t seed) {
  const int64_t words = units * unit / 4;
  uint32_t* w = reinterpret_cast<uint32_t*>(p);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x) {
    const int off = static_cast<int>((i * 4) % unit);
    const int in_half = off % (unit / 2);
    uint32_t v = Hash(seed + i);
    if (in_half >= kPageTokens * d / 4) {  // params slot
      const float scale = 0.05f + (v & 0xffff) * (0.4f / 65536.0f);
      const float mn = -1.5f * scale;
      v = __half_as_ushort(__float2half_rn(scale)) | (uint32_t(__half_as_ushort(__float2half_rn(mn))) << 16);
    }
    w[i] = v;
  }
}

struct Shape { int hq, hkv, d; };

// > 0: overrides the plan's min_tokens_per_split (variant rows; printed as mtok=).
int g_min_tokens = 0;
// >= 0: BF16 tokens per sequence of an INT2 case instead of min(S, 320) (variant rows that time
// the tiers apart: 0 = INT2 only; S = BF16 only through the three-tier plan; printed as bf=).
int g_bf16_tokens = -1;
// true: flips the plan's fuse_bf16_into_int2 (BF16 tier shared out among the INT2 splits, or
// separate BF16 splits), same split count; printed as "fuse flipped".
bool g_flip_fuse = false;
// true: the case runs but prints nothing (the warm-up row after the copy-bandwidth run).
bool g_quiet = false;
// true: page tables in allocation order (page ids 0, 1, 2, ... per tier) instead of shuffled: a
// variant that shows how much DRAM locality of the page units matters (printed as "sequential").
bool g_sequential = false;
// > 0: caps the plan's INT2 splits per (sequence, KV head) (variant rows; printed as "cap=N").
int g_max_splits = 0;
// true: the graph holds, instead of the decode calls, one launch per call of a kernel that only
// reads both pools (ReadPoolsKernel): the same bytes, no page tables, no math, no merge; what a
// single launch of this size can reach (printed as "read only").
bool g_read_only = false;
// true: overlap_prior_kernel off. Every other row sets it (the kernel before each call is the
// previous call's merge, which writes none of the tiers), as lib/model_gpu does after its q
// rotation; DecodeAttentionCuda uses it for few sequences only. Printed as "plain launch".
bool g_plain_launch = false;

// Copy bandwidth the single-case modes assume (bytes read + written per second).
constexpr double kNominalCopyBandwidth = 4.27e12;

double MedianMs(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over reps of kReplaysPerInterval calls of enqueue() back to back between two events, in
// microseconds per call (after 3 untimed calls). One call per event pair from an idle GPU also
// timed the host's launch and the event boundary: per call +1.0...2.2% for our graphs and
// +1.8...3.3% for cuDNN's (fewer calls per graph) against 10, same run (results/attn_v24/timing/).
constexpr int kReplaysPerInterval = 10;
template <class Enqueue>
double TimeIntervals(Enqueue enqueue, cudaStream_t s, int reps) {
  cudaEvent_t a, b;
  GPU_CHECK(cudaEventCreate(&a));
  GPU_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) enqueue();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    GPU_CHECK(cudaEventRecord(a, s));
    for (int k = 0; k < kReplaysPerInterval; ++k) enqueue();
    GPU_CHECK(cudaEventRecord(b, s));
    GPU_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    GPU_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / kReplaysPerInterval);
  }
  GPU_CHECK(cudaEventDestroy(a));
  GPU_CHECK(cudaEventDestroy(b));
  return MedianMs(t) * 1000.0;
}

// Times `graph` (which holds `copies` calls) with TimeIntervals, in microseconds per call.
double TimeGraph(cudaGraphExec_t exec, cudaStream_t s, int copies, int reps) {
  return TimeIntervals([&] { GPU_CHECK(cudaGraphLaunch(exec, s)); }, s, reps) / copies;
}

__global__ void CopyKernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    y[i] = x[i];
  }
}

// Reads x[0, n) and y[0, m) (16-byte words), 4 loads in flight per thread. The XOR of everything
// read is stored only if it equals an arbitrary constant: the compiler has to keep the loads, and
// a chance match writes one word.
__global__ void ReadPoolsKernel(const uint4* __restrict__ x, int64_t n, const uint4* __restrict__ y,
                                int64_t m, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int pool = 0; pool < 2; ++pool) {
    const uint4* p = pool == 0 ? x : y;
    const int64_t count = pool == 0 ? n : m;
    int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    for (; i + 3 * stride < count; i += 4 * stride) {
      uint4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = __ldcs(p + i + k * stride);
#pragma unroll
      for (int k = 0; k < 4; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    for (; i < count; i += stride) {
      const uint4 v = __ldcs(p + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Device-to-device copy bandwidth (bytes read + written per second) of a 2 GiB buffer, the best of
// three ways, each printed: a grid-stride vectorised kernel (the only way measured before session
// 22: 3.92 TB/s on the H200, 8% under the other two), one 16-byte word per thread, and
// cudaMemcpyAsync outside a graph (torch's copy_ read 2.8 TB/s captured in a graph,
// results/attn_v23/final_v23/sdpa.log). The floor is taken against the best, the card's copy
// ceiling (4.26-4.30 TB/s in session 22, results/attn_v24/copybw.log and copybw.cu).
double CopyBandwidth(cudaStream_t s) {
  const size_t bytes = size_t(2) << 30;
  const int64_t words = static_cast<int64_t>(bytes / 16);
  void *x, *y;
  GPU_CHECK(cudaMalloc(&x, bytes));
  GPU_CHECK(cudaMalloc(&y, bytes));
  GPU_CHECK(cudaMemset(x, 1, bytes));
  auto time_kernel = [&](unsigned blocks, unsigned threads) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CopyKernel<<<blocks, threads, 0, s>>>(static_cast<const uint4*>(x), static_cast<uint4*>(y),
                                          words);
    GPU_CHECK(cudaGetLastError());
    GPU_CHECK(cudaStreamEndCapture(s, &g));
    GPU_CHECK(cudaGraphInstantiate(&e, g, 0));
    const double us = TimeGraph(e, s, 1, 20);
    GPU_CHECK(cudaGraphExecDestroy(e));
    GPU_CHECK(cudaGraphDestroy(g));
    return us;
  };
  const double us_stride = time_kernel(132 * 8, 512);
  const double us_word = time_kernel(static_cast<unsigned>((words + 255) / 256), 256);
  const double us_memcpy = TimeIntervals(
      [&] { GPU_CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s)); }, s, 20);
  GPU_CHECK(cudaFree(x));
  GPU_CHECK(cudaFree(y));
  auto rate = [&](double us) { return 2.0 * bytes / (us * 1e-6); };
  std::printf(
      "copy bandwidth (read+write, 2 GiB): grid-stride kernel %.1f GB/s, one word per "
      "thread %.1f GB/s, cudaMemcpyAsync %.1f GB/s\n",
      rate(us_stride) / 1e9, rate(us_word) / 1e9, rate(us_memcpy) / 1e9);
  return std::max({rate(us_stride), rate(us_word), rate(us_memcpy)});
}

// One decode case: B sequences of S tokens; int2 = three-tier (sink 64 + recent 256 BF16, the
// rest INT2), else all S tokens BF16 (our BF16 paged baseline).
void RunDecode(const Shape& sh, int b, int s, bool int2, double bw, int ctas_per_sm, int sms,
               cudaStream_t stream) {
  const int bf_tokens = int2 ? (g_bf16_tokens >= 0 ? std::min(s, g_bf16_tokens) : std::min(s, 320)) : s;
  const int i2_tokens = s - bf_tokens;
  const int64_t bf_unit = oscarkv::kernels::Bf16PageUnitBytes(sh.d);
  const int64_t i2_unit = oscarkv::kernels::Int2PageUnitBytes(sh.d);
  const int bf_pages_seq = (bf_tokens + 7) / 8, i2_pages_seq = (i2_tokens + 7) / 8;
  const int64_t bf_pages = int64_t(b) * bf_pages_seq, i2_pages = int64_t(b) * i2_pages_seq;
  // Bytes that must be read: every K/V byte of both tiers, q; written: out.
  const double bytes = double(b) * sh.hkv *
                           (double(bf_tokens) * 4 * sh.d + double(i2_tokens) * (sh.d / 2 + 8)) +
                       double(b) * sh.hq * sh.d * 8;
  const int copies = std::max(1, std::min(8, int(std::ceil(240e6 / bytes))));
  std::mt19937_64 rng(b * 1000003ull + s);
  auto table = [&](int64_t pages, int pages_seq) {
    std::vector<int32_t> idx(pages);
    std::iota(idx.begin(), idx.end(), 0);
    if (!g_sequential) std::shuffle(idx.begin(), idx.end(), rng);
    std::vector<int32_t> indptr(b + 1);
    for (int i = 0; i <= b; ++i) indptr[i] = i * pages_seq;
    return std::make_pair(idx, indptr);
  };
  auto [bf_idx, bf_indptr] = table(bf_pages, bf_pages_seq);
  auto [i2_idx, i2_indptr] = table(i2_pages, i2_pages_seq);
  std::vector<int32_t> bf_tok(b, bf_tokens), i2_tok(b, i2_tokens);
  auto config = oscarkv::kernels::GpuDecodePlanConfig(b, sh.hkv, sh.hq, sh.d, i2_tokens, sms,
                                                            ctas_per_sm);
  if (g_min_tokens > 0) config.min_tokens_per_split = g_min_tokens;
  if (g_flip_fuse) config.fuse_bf16_into_int2 = !config.fuse_bf16_into_int2;
  if (g_max_splits > 0) {
    config.max_splits_per_tier = std::min(config.max_splits_per_tier, g_max_splits);
  }
  const auto plan = oscarkv::kernels::PlanDecodeAttention(config, b, bf_tok.data(), i2_tok.data());

  std::vector<void*> frees;
  auto alloc = [&](size_t n) {
    void* p;
    GPU_CHECK(cudaMalloc(&p, std::max<size_t>(n, 16)));
    frees.push_back(p);
    return p;
  };
  std::vector<float> qh(size_t(b) * sh.hq * sh.d);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& x : qh) x = nd(rng);
  float* q = oscarkv::testing::ToDevice(qh);
  frees.push_back(q);
  DecodeAttentionParams p;
  p.num_seqs = b;
  p.num_q_heads = sh.hq;
  p.num_kv_heads = sh.hkv;
  p.head_dim = sh.d;
  p.sm_scale = 1.0f / std::sqrt(float(sh.d));
  p.q = q;
  p.q_seq_stride = int64_t(sh.hq) * sh.d;
  p.bf16.page_indptr = oscarkv::testing::ToDevice(bf_indptr);
  p.bf16.page_indices = oscarkv::testing::ToDevice(bf_idx);
  p.bf16.seq_tokens = oscarkv::testing::ToDevice(bf_tok);
  p.bf16.page_stride_bytes = sh.hkv * bf_unit;
  p.bf16.head_stride_bytes = bf_unit;
  p.int2.page_indptr = oscarkv::testing::ToDevice(i2_indptr);
  p.int2.page_indices = oscarkv::testing::ToDevice(i2_idx);
  p.int2.seq_tokens = i2_tokens > 0 ? oscarkv::testing::ToDevice(i2_tok) : nullptr;
  p.int2.page_stride_bytes = sh.hkv * i2_unit;
  p.int2.head_stride_bytes = i2_unit;
  p.work = oscarkv::testing::ToDevice(plan.work);
  p.seq_work_indptr = oscarkv::testing::ToDevice(plan.seq_work_indptr);
  p.num_work = plan.num_work();
  p.partial_out = static_cast<float*>(alloc(plan.PartialOutFloats(sh.hq, sh.d) * 4));
  p.partial_lse = static_cast<float*>(alloc(plan.PartialLseFloats(sh.hq) * 4));
  p.merge_counters = static_cast<int32_t*>(alloc(size_t(b) * sh.hq * 4));
  GPU_CHECK(cudaMemset(p.merge_counters, 0, size_t(b) * sh.hq * 4));
  p.out = static_cast<float*>(alloc(size_t(b) * sh.hq * sh.d * 4));
  p.out_seq_stride = int64_t(sh.hq) * sh.d;
  p.one_split_per_seq = plan.OneSplitPerSequence();
  p.overlap_prior_kernel = !g_plain_launch;
  std::vector<DecodeAttentionParams> calls;
  for (int c = 0; c < copies; ++c) {
    DecodeAttentionParams pc = p;
    uint8_t* bfp = static_cast<uint8_t*>(alloc(bf_pages * sh.hkv * bf_unit));
    FillBf16<<<1024, 256, 0, stream>>>(reinterpret_cast<uint16_t*>(bfp), bf_pages * sh.hkv * bf_unit / 2, 77 + c);
    GPU_CHECK(cudaGetLastError());
    pc.bf16.pool = bfp;
    if (i2_pages > 0) {
      uint8_t* i2p = static_cast<uint8_t*>(alloc(i2_pages * sh.hkv * i2_unit));
      FillInt2<<<1024, 256, 0, stream>>>(i2p, i2_pages * sh.hkv, int(i2_unit), sh.d, 99 + c);
      GPU_CHECK(cudaGetLastError());
      pc.int2.pool = i2p;
    }
    calls.push_back(pc);
  }
  uint32_t* sink = static_cast<uint32_t*>(alloc(4));  // ReadPoolsKernel's
  GPU_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t g;
  cudaGraphExec_t e;
  GPU_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (const auto& c : calls) {
    if (g_read_only) {
      ReadPoolsKernel<<<sms * 4, 512, 0, stream>>>(
          reinterpret_cast<const uint4*>(c.int2.pool), i2_pages * sh.hkv * i2_unit / 16,
          reinterpret_cast<const uint4*>(c.bf16.pool), bf_pages * sh.hkv * bf_unit / 16, sink);
      GPU_CHECK(cudaGetLastError());
    } else {
      GPU_CHECK(oscarkv::kernels::DecodeAttentionCuda(c, stream));
    }
  }
  GPU_CHECK(cudaStreamEndCapture(stream, &g));
  GPU_CHECK(cudaGraphInstantiate(&e, g, 0));
  const double us = TimeGraph(e, stream, copies, 50);
  std::vector<float> out = oscarkv::testing::ToHost(p.out, size_t(b) * sh.hq * sh.d);
  bool finite = true;
  for (float x : out) finite = finite && std::isfinite(x);
  GPU_CHECK(cudaGraphExecDestroy(e));
  GPU_CHECK(cudaGraphDestroy(g));
  for (void* ptr : frees) GPU_CHECK(cudaFree(ptr));
  for (const void* ptr : {(const void*)p.bf16.page_indptr, (const void*)p.bf16.page_indices,
                          (const void*)p.bf16.seq_tokens, (const void*)p.int2.page_indptr,
                          (const void*)p.int2.page_indices, (const void*)p.int2.seq_tokens,
                          (const void*)p.work, (const void*)p.seq_work_indptr}) {
    if (ptr) GPU_CHECK(cudaFree(const_cast<void*>(ptr)));
  }
  const double floor_us = bytes / bw * 1e6;
  if (g_quiet) return;
  if (g_read_only) {
    std::printf("read only   Hq=%2d Hkv=%d D=%3d B=%2d S=%6d  (both pools, one launch per call) "
                "%8.2f us  %7.1f GB/s  floor %7.2f us  %5.1f%% of floor\n",
                sh.hq, sh.hkv, sh.d, b, s, us, bytes / (us * 1e-6) / 1e9, floor_us,
                100.0 * floor_us / us);
    return;
  }
  std::printf("decode %-5s Hq=%2d Hkv=%d D=%3d B=%2d S=%6d cps=%s mtok=%3d bf=%5d splits=%5d  %8.2f us  %7.1f GB/s  floor %7.2f us  %5.1f%% of floor%s%s%s%s%s\n",
              int2 ? "int2" : "bf16", sh.hq, sh.hkv, sh.d, b, s,
              ctas_per_sm > 0 ? std::to_string(ctas_per_sm).c_str() : "auto",
              config.min_tokens_per_split, bf_tokens,
              plan.num_work(), us,
              bytes / (us * 1e-6) / 1e9, floor_us, 100.0 * floor_us / us, finite ? "" : "  NON-FINITE OUTPUT",
              g_flip_fuse ? "  fuse flipped" : "", g_sequential ? "  sequential" : "",
              g_max_splits > 0 ? ("  cap=" + std::to_string(g_max_splits)).c_str() : "",
              g_plain_launch ? "  plain launch" : "");
}

// One demotion case (DemoteToPagesCuda): `tokens` tokens x `heads` bf16 rows of dim d, clipped at
// `clip`, optionally rotated, into shuffled INT2 pages. Each copy has its own input and pool, and
// one timed graph holds enough copies to read more than 4x the L2. Bytes = bf16 rows read + codes
// and fp16 params written; the rotation's FP64 floor is rows * d^2 fma at 64 DFMA/clk/SM.
void RunDemote(int tokens, int heads, int d, bool rotate, float clip, double bw, int sms,
               cudaStream_t stream) {
  const int64_t rows = int64_t(tokens) * heads;
  const int64_t unit = oscarkv::kernels::Int2PageUnitBytes(d);
  const int pages = (tokens + kPageTokens - 1) / kPageTokens;
  const double in_bytes = double(rows) * 2 * d;
  const double bytes = in_bytes + double(rows) * (d / 4 + 4);
  const int copies = std::max(1, std::min(32, int(std::ceil(240e6 / in_bytes))));
  std::vector<void*> frees;
  auto alloc = [&](size_t n) {
    void* p;
    GPU_CHECK(cudaMalloc(&p, std::max<size_t>(n, 16)));
    frees.push_back(p);
    return p;
  };
  std::vector<float> r(size_t(d) * d, 0.f);
  for (int i = 0; i < d; ++i) r[i * d + (i * 7) % d] = 1.0f;  // a permutation: orthogonal
  float* rot = static_cast<float*>(alloc(r.size() * 4));
  GPU_CHECK(cudaMemcpy(rot, r.data(), r.size() * 4, cudaMemcpyHostToDevice));
  std::mt19937_64 rng(uint64_t(tokens) * 31 + heads);
  std::vector<int32_t> ids(pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int32_t* d_ids = static_cast<int32_t*>(alloc(ids.size() * 4));
  GPU_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  using Call = std::pair<oscarkv::kernels::KvQuantParams, oscarkv::kernels::DemotePagesTarget>;
  std::vector<Call> calls;
  for (int c = 0; c < copies; ++c) {
    uint16_t* in = static_cast<uint16_t*>(alloc(size_t(rows) * d * 2));
    FillBf16<<<1024, 256, 0, stream>>>(in, rows * d, 5 + c);
    GPU_CHECK(cudaGetLastError());
    oscarkv::kernels::KvQuantParams p;
    p.input_bf16 = in;
    p.rotation = rotate ? rot : nullptr;
    p.tokens = tokens;
    p.heads = heads;
    p.head_dim = d;
    p.clip_ratio = clip;
    oscarkv::kernels::DemotePagesTarget t;
    t.pool = static_cast<uint8_t*>(alloc(size_t(pages) * heads * unit));
    t.page_ids = d_ids;
    t.page_stride_bytes = heads * unit;
    t.head_stride_bytes = unit;
    t.segment_offset_bytes = oscarkv::kernels::Int2PageVCodesOffset(d);
    calls.emplace_back(p, t);
  }
  GPU_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t g;
  cudaGraphExec_t e;
  GPU_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (const auto& [p, t] : calls) GPU_CHECK(oscarkv::kernels::DemoteToPagesCuda(p, t, stream));
  GPU_CHECK(cudaStreamEndCapture(stream, &g));
  GPU_CHECK(cudaGraphInstantiate(&e, g, 0));
  const double us = TimeGraph(e, stream, copies, 20);
  const double floor_us = bytes / bw * 1e6;
  // H200: 64 FP64 FMA per clock per SM at ~1.98 GHz.
  const double fp64_floor_us = rotate ? double(rows) * d * d / (64.0 * sms * 1.98e9) * 1e6 : 0.0;
  std::printf("demote %-6s T=%6d H=%d D=%3d clip=%.2f copies=%2d  %9.2f us  %7.1f GB/s  "
              "%5.1f%% of copy bandwidth (floor %7.2f us)",
              rotate ? "rotate" : "bf16", tokens, heads, d, clip, copies, us,
              bytes / (us * 1e-6) / 1e9, 100.0 * floor_us / us, floor_us);
  if (rotate) std::printf("  FP64 floor %7.2f us", fp64_floor_us);
  std::printf("\n");
  GPU_CHECK(cudaGraphExecDestroy(e));
  GPU_CHECK(cudaGraphDestroy(g));
  for (void* ptr : frees) GPU_CHECK(cudaFree(ptr));
}

// Issue rate of the demotion kernel's hot-path instructions (bench/NOTES.md "Demotion v4"): one
// block of 32 warps per SM, each thread 8 independent chains of one instruction (inline PTX, so
// the SASS is that instruction), clock64 around the loop; prints warp instructions per cycle per
// SM sub-partition (1.0 = one per cycle, FFMA's rate; 0.5 = the integer ALU's).
enum class ProbeOp { kFfma, kHmnmx2Bf16, kHsetBf16, kVimnmxU16x2, kVimnmxU32, kLop3, kImad, kPrmt,
                     kShfl, kCvtF64 };
constexpr int kProbeIters = 512;
template <ProbeOp kOp>
__device__ __forceinline__ void ProbeStep(uint32_t& a, float& f, double& dd, uint32_t b) {
  if constexpr (kOp == ProbeOp::kFfma) {
    asm volatile("fma.rn.f32 %0, %0, %1, %1;" : "+f"(f) : "f"(__uint_as_float(b)));
  } else if constexpr (kOp == ProbeOp::kHmnmx2Bf16) {
    // max then min (two instructions): two maxes in a row fuse into one 3-input VHMNMX.
    asm volatile("max.bf16x2 %0, %0, %1;" : "+r"(a) : "r"(b));
    asm volatile("min.bf16x2 %0, %0, %1;" : "+r"(a) : "r"(b ^ 0x00400040u));
  } else if constexpr (kOp == ProbeOp::kHsetBf16) {
    asm volatile("set.gt.u32.bf16x2 %0, %0, %1;" : "+r"(a) : "r"(b));
  } else if constexpr (kOp == ProbeOp::kVimnmxU16x2) {
    asm volatile("max.u16x2 %0, %0, %1;" : "+r"(a) : "r"(b));
    asm volatile("min.u16x2 %0, %0, %1;" : "+r"(a) : "r"(b ^ 0x00400040u));
  } else if constexpr (kOp == ProbeOp::kVimnmxU32) {
    asm volatile("max.u32 %0, %0, %1;" : "+r"(a) : "r"(b));
    asm volatile("min.u32 %0, %0, %1;" : "+r"(a) : "r"(b ^ 0x00400040u));
  } else if constexpr (kOp == ProbeOp::kLop3) {
    asm volatile("lop3.b32 %0, %0, %1, %1, 0x96;" : "+r"(a) : "r"(b));
  } else if constexpr (kOp == ProbeOp::kImad) {
    asm volatile("mad.lo.u32 %0, %0, %1, %1;" : "+r"(a) : "r"(b));
  } else if constexpr (kOp == ProbeOp::kPrmt) {
    asm volatile("prmt.b32 %0, %0, %1, 0x1032;" : "+r"(a) : "r"(b));
  } else if constexpr (kOp == ProbeOp::kShfl) {
    asm volatile("shfl.sync.bfly.b32 %0, %0, 1, 0x1f, 0xffffffff;" : "+r"(a));
  } else {
    // double -> float -> double loses bits, so the pair is not an identity to be removed.
    asm volatile("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(dd));
    asm volatile("cvt.f64.f32 %0, %1;" : "+d"(dd) : "f"(f));
  }
}
template <ProbeOp kOp>
__global__ void __launch_bounds__(1024) PipeProbeKernel(uint32_t seed, long long* cycles,
                                                         uint32_t* sink) {
  uint32_t a[8];
  float f[8];
  double dd[8];
  for (int i = 0; i < 8; ++i) {
    a[i] = seed * (i + 1) + threadIdx.x;
    f[i] = 1.0f + static_cast<float>(a[i] & 0xff) * 1e-3f;  // from the runtime seed: ptxas
    dd[i] = 1.0 + static_cast<double>(a[i]) * 1e-12;          // folds constant chains
  }
  const uint32_t b = seed ^ 0x3f803f80u;
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < kProbeIters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) ProbeStep<kOp>(a[i], f[i], dd[i], b);
  }
  const long long t1 = clock64();
  uint32_t x = 0;
  for (int i = 0; i < 8; ++i) x ^= a[i] ^ __float_as_uint(f[i]) ^ static_cast<uint32_t>(dd[i]);
  if (x == 0x12345678u) sink[0] = x;
  if ((threadIdx.x & 31) == 0) cycles[blockIdx.x * 32 + threadIdx.x / 32] = t1 - t0;
}
template <ProbeOp kOp>
void RunPipeProbe(const char* name, int sms, cudaStream_t stream) {
  long long* cycles;
  uint32_t* sink;
  GPU_CHECK(cudaMalloc(&cycles, size_t(sms) * 32 * sizeof(long long)));
  GPU_CHECK(cudaMalloc(&sink, 4));
  PipeProbeKernel<kOp><<<sms, 1024, 0, stream>>>(1, cycles, sink);  // warm-up
  PipeProbeKernel<kOp><<<sms, 1024, 0, stream>>>(2, cycles, sink);
  GPU_CHECK(cudaStreamSynchronize(stream));
  std::vector<long long> c(size_t(sms) * 32);
  GPU_CHECK(cudaMemcpy(c.data(), cycles, c.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  // Per block (one per SM): the slowest warp; then the median block.
  std::vector<long long> per_sm(sms);
  for (int i = 0; i < sms; ++i) per_sm[i] = *std::max_element(c.begin() + i * 32, c.begin() + i * 32 + 32);
  std::nth_element(per_sm.begin(), per_sm.begin() + sms / 2, per_sm.end());
  constexpr bool kPairs = kOp == ProbeOp::kCvtF64 || kOp == ProbeOp::kHmnmx2Bf16 ||
                          kOp == ProbeOp::kVimnmxU16x2 || kOp == ProbeOp::kVimnmxU32;
  const double instr = 8.0 /* warps per sub-partition */ * kProbeIters * 8 * (kPairs ? 2 : 1);
  std::printf("pipe probe %-22s %5.3f warp instructions / cycle / SM sub-partition\n", name,
              instr / double(per_sm[sms / 2]));
  GPU_CHECK(cudaFree(cycles));
  GPU_CHECK(cudaFree(sink));
}
void RunPipeProbes(int sms, cudaStream_t stream) {
  RunPipeProbe<ProbeOp::kFfma>("FFMA", sms, stream);
  RunPipeProbe<ProbeOp::kHmnmx2Bf16>("HMNMX2.BF16 (max, min)", sms, stream);
  RunPipeProbe<ProbeOp::kHsetBf16>("HSET2.BF16 (mask)", sms, stream);
  RunPipeProbe<ProbeOp::kVimnmxU16x2>("VIMNMX.U16x2 (max, min)", sms, stream);
  RunPipeProbe<ProbeOp::kVimnmxU32>("VIMNMX.U32 (max, min)", sms, stream);
  RunPipeProbe<ProbeOp::kLop3>("LOP3", sms, stream);
  RunPipeProbe<ProbeOp::kImad>("IMAD", sms, stream);
  RunPipeProbe<ProbeOp::kPrmt>("PRMT", sms, stream);
  RunPipeProbe<ProbeOp::kShfl>("SHFL.BFLY", sms, stream);
  RunPipeProbe<ProbeOp::kCvtF64>("F2F.F64.F32 + F2F.F32.F64", sms, stream);
}

constexpr char kUsage[] =
    "Decode attention and demotion timings on the GPU (bench/kernels/RESULTS.md).\n"
    "Usage:\n"
    "  decode_attention_bench [--quick]\n"
    "      the grid (--quick: the four goal shapes), variant rows, demotion, pipe probes\n"
    "  decode_attention_bench --only D B S [CPS [CAP [FLIP]]]\n"
    "      one INT2 case: head_dim D (64: Hq9/Hkv3, 128: Hq32/Hkv8), B sequences of S tokens;\n"
    "      CPS the plan's stage-1 CTAs per SM (0: its own), CAP a cap on its splits per tier\n"
    "      (0: none), FLIP 1 flips its fuse_bf16_into_int2. Environment:\n"
    "      OSCARKV_BENCH_PLAIN_LAUNCH=1 (no overlap with the kernel before),\n"
    "      OSCARKV_BENCH_BF16_TOKENS=N (N BF16 tokens a sequence instead of 320)\n"
    "  decode_attention_bench --demote D CLIP [T]\n"
    "      one unrotated bf16 demotion case: T tokens (default 32768) x the shape's KV heads,\n"
    "      clip ratio CLIP in (0, 1] (1: no clip)\n"
    "  decode_attention_bench --cap-sweep D S\n"
    "      B=1 INT2 rows of S tokens with the plan's splits capped at several values\n"
    "  decode_attention_bench --help\n";

// A whole-string integer in [lo, hi].
std::optional<int> IntArg(const char* s, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return std::nullopt;
  return static_cast<int>(v);
}

// What the command line asks for; every number checked before any GPU work.
struct BenchArgs {
  enum class Mode { kGrid, kOnly, kDemote, kCapSweep } mode = Mode::kGrid;
  bool quick = false;
  int d = 128, b = 1, s = 0, cps = 0, cap = 0, tokens = 32768;
  int bf16_tokens = -1;  // OSCARKV_BENCH_BF16_TOKENS (--only); -1: min(S, 320)
  bool flip = false;
  float clip = 1.0f;
};

// nullopt after printing the reason (and the usage) to stderr.
std::optional<BenchArgs> ParseArgs(int argc, char** argv) {
  BenchArgs a;
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto fail = [&](const std::string& reason) -> std::optional<BenchArgs> {
    std::fprintf(stderr, "decode_attention_bench: %s\n%s", reason.c_str(), kUsage);
    return std::nullopt;
  };
  bool ok = true;  // false once an argument is bad; `why` then says which (the first)
  std::string why;
  // argv[i] as an integer in [lo, hi], named `what` in the error.
  const auto num = [&](int i, const char* what, long lo, long hi) {
    const std::optional<int> v = IntArg(argv[i], lo, hi);
    if (!v && ok) {
      ok = false;
      why = mode + ": " + what + " must be an integer in [" + std::to_string(lo) +
            ", " + std::to_string(hi) + "], got '" + argv[i] + "'";
    }
    return v.value_or(0);
  };
  const auto head_dim = [&](int i) {
    const std::optional<int> d = IntArg(argv[i], 64, 128);
    if ((!d || (*d != 64 && *d != 128)) && ok) {
      ok = false;
      why = mode + ": D must be 64 or 128, got '" + argv[i] + "'";
    }
    return d.value_or(128);
  };
  constexpr long kMaxTokens = 1L << 22, kMaxSeqs = 4096;
  if (argc == 1 || (argc == 2 && mode == "--quick")) {
    a.quick = argc == 2;
  } else if (mode == "--only" && argc >= 5 && argc <= 8) {
    a.mode = BenchArgs::Mode::kOnly;
    a.d = head_dim(2);
    a.b = num(3, "B", 1, kMaxSeqs);
    a.s = num(4, "S", 1, kMaxTokens);
    if (argc >= 6) a.cps = num(5, "CPS", 0, 32);
    if (argc >= 7) a.cap = num(6, "CAP", 0, 1 << 16);
    if (argc == 8) a.flip = num(7, "FLIP", 0, 1) != 0;
    if (const char* bf = std::getenv("OSCARKV_BENCH_BF16_TOKENS"); bf != nullptr && ok) {
      const std::optional<int> v = IntArg(bf, 0, kMaxTokens);
      if (!v) {
        ok = false;
        why = std::string("OSCARKV_BENCH_BF16_TOKENS must be a token count, got '") + bf + "'";
      }
      a.bf16_tokens = v.value_or(-1);
    }
  } else if (mode == "--demote" && (argc == 4 || argc == 5)) {
    a.mode = BenchArgs::Mode::kDemote;
    a.d = head_dim(2);
    char* end = nullptr;
    a.clip = std::strtof(argv[3], &end);
    if (ok && (end == argv[3] || *end != '\0' || !(a.clip > 0.0f && a.clip <= 1.0f))) {
      ok = false;
      why = std::string("--demote: CLIP must be a ratio in (0, 1], got '") + argv[3] + "'";
    }
    if (argc == 5) a.tokens = num(4, "T", 1, kMaxTokens);
  } else if (mode == "--cap-sweep" && argc == 4) {
    a.mode = BenchArgs::Mode::kCapSweep;
    a.d = head_dim(2);
    a.s = num(3, "S", 1, kMaxTokens);
  } else {
    const bool known =
        mode == "--only" || mode == "--demote" || mode == "--cap-sweep" || mode == "--quick";
    return fail(known ? "wrong number of arguments for " + mode : "unknown arguments");
  }
  if (!ok) return fail(why);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::optional<BenchArgs> args = ParseArgs(argc, argv);
  if (!args) return 2;
  if (!oscarkv::testing::HaveGpu()) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  const bool quick = args->quick;
  cudaStream_t stream;
  GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int sms = 0;
  GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // The two shapes by head_dim: Qwen3-8B-like (D = 128) and the default model's (D = 64).
  const Shape shape = args->d == 64 ? Shape{9, 3, 64} : Shape{32, 8, 128};
  // Single-case modes take the floor at a nominal 4.27 TB/s, the card's copy ceiling as measured
  // by CopyBandwidth (no copy-bandwidth run).
  switch (args->mode) {
    case BenchArgs::Mode::kOnly:  // profilers, A/B runs
      g_plain_launch = std::getenv("OSCARKV_BENCH_PLAIN_LAUNCH") != nullptr;
      g_bf16_tokens = args->bf16_tokens;
      g_max_splits = args->cap;
      g_flip_fuse = args->flip;
      RunDecode(shape, args->b, args->s, true, kNominalCopyBandwidth, args->cps, sms, stream);
      return 0;
    case BenchArgs::Mode::kDemote:
      RunDemote(args->tokens, shape.hkv, shape.d, false, args->clip, kNominalCopyBandwidth, sms,
                stream);
      return 0;
    case BenchArgs::Mode::kCapSweep:
      for (int cap : {0, 24, 32, 40, 44, 46, 48, 56, 64, 80, 96, 128}) {
        g_max_splits = cap;
        RunDecode(shape, 1, args->s, true, kNominalCopyBandwidth, 0, sms, stream);
      }
      g_max_splits = 0;
      return 0;
    case BenchArgs::Mode::kGrid:
      break;
  }
  const double bw = CopyBandwidth(stream);
  std::printf("copy bandwidth (read+write), the best of the three: %.1f GB/s, SMs %d\n", bw / 1e9,
              sms);
  const Shape shapes[] = {{32, 8, 128}, {9, 3, 64}};
  // Warm-up, not printed: right after the copy-bandwidth run the first case read ~1.2 us high at
  // D=128 B=1 128k against the same plan later in the process and in a process of its own
  // (results/attn_v13/first_row.log).
  g_quiet = true;
  RunDecode(shapes[0], 1, 131072, true, bw, 0, sms, stream);
  g_quiet = false;
  for (const Shape& sh : shapes) {
    for (int b : {1, 8, 32}) {
      for (int s : {8192, 32768, 131072}) {
        if (quick && !(b == 1 && s == 131072) && !(b == 32 && s == 8192)) continue;
        RunDecode(sh, b, s, true, bw, 0, sms, stream);
        if (b == 1 && s == 131072) {  // variant: other split counts (the plan's ctas_per_sm)
          for (int cps : {2, 3, 8}) RunDecode(sh, b, s, true, bw, cps, sms, stream);
        }
        if ((b == 32 && s == 8192) || (b == 1 && s == 131072)) {
          // variant: the other BF16 handling (fused into the INT2 splits or separate splits),
          // with the default plan's split count
          g_flip_fuse = true;
          RunDecode(sh, b, s, true, bw, 0, sms, stream);
          g_flip_fuse = false;
          g_sequential = true;  // variant: unshuffled pages
          RunDecode(sh, b, s, true, bw, 0, sms, stream);
          g_sequential = false;
          g_plain_launch = true;  // variant: not overlapping the kernel before
          RunDecode(sh, b, s, true, bw, 0, sms, stream);
          g_plain_launch = false;
          g_read_only = true;  // ceiling: a kernel that only reads the same bytes
          RunDecode(sh, b, s, true, bw, 0, sms, stream);
          g_read_only = false;
        }
        // Variants that time the tiers apart: the INT2 history alone (no BF16 tier), then the
        // BF16 sink + recent alone (320 tokens, the three-tier plan's BF16 splits).
        if ((b == 32 && s == 8192) || (b == 1 && s == 131072)) {
          g_bf16_tokens = 0;
          RunDecode(sh, b, s, true, bw, 0, sms, stream);
          g_bf16_tokens = -1;
          RunDecode(sh, b, 320, true, bw, 0, sms, stream);
        }
        RunDecode(sh, b, s, false, bw, 0, sms, stream);
      }
    }
  }
  // Demotion: the model's call is bf16 rows without rotation, K clipped at 0.96 and V at 0.92;
  // then the rotated path (FP64-bound) and one decode step's worth (one page of 64 sequences).
  for (const Shape& sh : shapes) {
    for (float clip : {0.96f, 0.92f}) RunDemote(32768, sh.hkv, sh.d, false, clip, bw, sms, stream);
  }
  for (const Shape& sh : shapes) RunDemote(32768, sh.hkv, sh.d, true, 0.96f, bw, sms, stream);
  RunDemote(64 * kPageTokens, 8, 128, false, 0.96f, bw, sms, stream);
  // Variant rows: no clip (no threshold search: what the rest of the row pipeline costs), and
  // the issue rates of the instructions the row pipeline is made of.
  for (const Shape& sh : shapes) RunDemote(32768, sh.hkv, sh.d, false, 1.0f, bw, sms, stream);
  RunPipeProbes(sms, stream);
  GPU_CHECK(cudaStreamDestroy(stream));
  return 0;
}
