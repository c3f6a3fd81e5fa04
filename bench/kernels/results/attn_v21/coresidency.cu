// Which small blocks fit on an SM beside two long-running 5-warp CTAs of ~152 registers and
// ~76 KB of shared memory each (decode attention's stage-1 layout at 2 per SM)? Session 18's trace
// found that no 8- or 4-warp merge block (40 registers) ever started beside two such CTAs while
// 2-warp blocks did; this says which resource binds, by trying warps x registers of the guest.
//
// Host kernel: 2 CTAs per SM of 160 threads (2 per SM by the shared memory they ask for), each
// spinning 1 ms with ~152 registers live. Guest kernel: one block per SM of W warps with R
// registers live, each recording its start, launched on a second stream once the host runs, or
// as a programmatic dependent of the host on its stream (as decode attention launches its
// merge), directly or captured with the host in a CUDA graph (as the bench replays the calls);
// optionally both kernels with a barrier; session 19 added guests with dynamic shared memory
// (decode attention's merge blocks have 1 KB), with and without the largest carveout asked. A
// guest "fits" when its blocks start before the host ends.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o coresidency coresidency.cu
// Run:   ./coresidency   (prints one line per guest shape: blocks started beside the host)
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));           \
      return 1;                                                               \
    }                                                                         \
  } while (0)

__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Keeps N floats live across a spin loop so that ptxas allocates about N registers.
template <int N, bool kBar = false>
__device__ __forceinline__ float Burn(unsigned long long until, float seed) {
  float v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = seed + i;
  while (Now() < until) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = v[i] * v[(i + 1) % N] + 1.0f;
    if constexpr (kBar) __syncthreads();
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += v[i];
  return s;
}

template <int N, bool kBar = false, bool kWait = false>
__global__ void __maxnreg__(N + 16) Host(unsigned long long ns, float* sink,
                                         unsigned long long* end) {
  extern __shared__ float pad[];
  asm volatile("griddepcontrol.launch_dependents;");  // lets a PDL guest start (pdl mode)
  if constexpr (kWait) asm volatile("griddepcontrol.wait;" ::: "memory");  // as stage 1 does
  const unsigned long long t0 = Now();
  const float s = Burn<N, kBar>(t0 + ns, threadIdx.x);
  if (s == 12345.0f) sink[0] = pad[threadIdx.x];  // never true; keeps the work
  if (threadIdx.x == 0) atomicMax(end, Now());
}

template <int N, bool kBar = false>
__global__ void __maxnreg__(N + 16) Guest(unsigned long long* start, float* sink) {
  extern __shared__ float gpad[];  // sized by the launch (0 unless a row asks for some)
  if (threadIdx.x == 0) start[blockIdx.x] = Now();
  const float s = Burn<N, kBar>(Now() + 2000, threadIdx.x);
  if (s == 12345.0f) sink[1] = gpad[threadIdx.x];
}

// How the guest is launched: on its own stream, as a programmatic dependent of the host on the
// host's stream (as decode attention launches its merge), or that pair captured in a CUDA graph
// (as the bench replays the calls).
// kChainPdl: as kGraphPdl, with the host itself launched as a programmatic dependent of a short
// kernel before it (stage 1 is the dependent of the previous call's merge).
enum class Launch { kOwnStream, kPdl, kGraphPdl, kChainPdl };
bool g_print = true;  // false for the first (warm-up) case

template <int N, bool kBar = false>
int TryGuest(int warps, int host_smem,
             void (*host)(unsigned long long, float*, unsigned long long*),
             Launch mode = Launch::kOwnStream, int guest_smem = 0, int guest_carveout = -1) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  float* sink;
  unsigned long long *start, *end;
  CHECK(cudaMalloc(&sink, 64));
  CHECK(cudaMalloc(&start, sms * 8));
  CHECK(cudaMalloc(&end, 8));
  CHECK(cudaMemset(end, 0, 8));
  if (guest_carveout >= 0) {
    CHECK(cudaFuncSetAttribute(Guest<N, kBar>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               guest_carveout));
  }
  Guest<N, kBar><<<1, 32, guest_smem, b>>>(start, sink);  // loads the code before the timing
  CHECK(cudaStreamSynchronize(b));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(sms);
  cfg.blockDim = dim3(32 * warps);
  cfg.dynamicSmemBytes = guest_smem;
  cfg.stream = a;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  if (mode == Launch::kGraphPdl || mode == Launch::kChainPdl) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal));
    if (mode == Launch::kChainPdl) {
      Guest<N, kBar><<<sms, 128, 0, a>>>(start, sink);  // the "previous merge" (overwritten)
      cudaLaunchConfig_t hc = cfg;
      hc.gridDim = dim3(2 * sms);
      hc.blockDim = dim3(160);
      hc.dynamicSmemBytes = host_smem;
      CHECK(cudaLaunchKernelEx(&hc, host, 1000000ull, sink, end));
    } else {
      host<<<2 * sms, 160, host_smem, a>>>(1000000ull, sink, end);
    }
    CHECK(cudaLaunchKernelEx(&cfg, Guest<N, kBar>, start, sink));
    CHECK(cudaStreamEndCapture(a, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, a));
    CHECK(cudaStreamSynchronize(a));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  } else {
    host<<<2 * sms, 160, host_smem, a>>>(1000000ull, sink, end);
    CHECK(cudaGetLastError());
    // A spin on the host side (tens of us, well inside the host kernel's 1 ms), so that the host
    // fills every SM first.
    for (volatile int i = 0; i < 20000; ++i) {
    }
    if (mode == Launch::kPdl) {
      CHECK(cudaLaunchKernelEx(&cfg, Guest<N, kBar>, start, sink));
    } else {
      Guest<N, kBar><<<sms, 32 * warps, guest_smem, b>>>(start, sink);
    }
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> s(sms);
  unsigned long long e = 0;
  CHECK(cudaMemcpy(s.data(), start, sms * 8, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&e, end, 8, cudaMemcpyDeviceToHost));
  int beside = 0;
  for (unsigned long long t : s) beside += t < e;
  cudaFuncAttributes fa{}, fh{};
  CHECK(cudaFuncGetAttributes(&fa, Guest<N, kBar>));
  CHECK(cudaFuncGetAttributes(&fh, host));
  static const char* const kModes[] = {"   ", "PDL", "graph+PDL", "chain+PDL"};
  if (g_print) {
    std::printf("host %d regs %d B smem x2 per SM%s | %9s guest %d warps x %3d regs%s, %d B smem%s: "
                "%3d of %d blocks started beside the host\n",
                fh.numRegs, host_smem + static_cast<int>(fh.sharedSizeBytes), kBar ? " +bar" : "",
                kModes[static_cast<int>(mode)], warps, fa.numRegs, kBar ? " +bar" : "",
                guest_smem, guest_carveout >= 0 ? " (carveout max)" : "", beside, sms);
  }
  cudaFree(sink);
  cudaFree(start);
  cudaFree(end);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  return 0;
}

int main() {
  int per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  const int pad = per_sm / 3 + 128 - 1024;  // decode attention's Stage1SmemPad at 2 per SM
  auto host152 = Host<142>;
  auto host144 = Host<134>;
  CHECK(cudaFuncSetAttribute(host152, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
  CHECK(cudaFuncSetAttribute(host144, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
  // One unprinted case first, so that the printed ones start from the same state (before it was
  // added, the 1-warp rows on their own stream read 0 of 132 in both runs; not understood).
  g_print = false;
  if (TryGuest<16>(2, pad, host152)) return 1;
  g_print = true;
  for (int warps : {1, 2, 4, 8}) {
    if (TryGuest<16>(warps, pad, host152) || TryGuest<24>(warps, pad, host152) ||
        TryGuest<32>(warps, pad, host152) || TryGuest<48>(warps, pad, host152)) {
      return 1;
    }
  }
  std::printf("-- host at fewer registers\n");
  for (int warps : {2, 4, 8}) {
    if (TryGuest<24>(warps, pad, host144) || TryGuest<48>(warps, pad, host144)) return 1;
  }
  std::printf("-- guest as a programmatic dependent of the host (same stream)\n");
  for (int warps : {1, 2, 4, 8}) {
    if (TryGuest<32>(warps, pad, host152, Launch::kPdl)) return 1;
  }
  std::printf("-- both kernels with a barrier (__syncthreads)\n");
  auto host152bar = Host<142, true>;
  CHECK(cudaFuncSetAttribute(host152bar, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
  for (int warps : {2, 4}) {
    if (TryGuest<32, true>(warps, pad, host152bar, Launch::kPdl) ||
        TryGuest<32, true>(warps, pad, host152bar, Launch::kOwnStream)) {
      return 1;
    }
  }
  std::printf("-- guest as a programmatic dependent, both captured in a CUDA graph\n");
  for (int warps : {2, 4}) {
    if (TryGuest<32>(warps, pad, host152, Launch::kGraphPdl) ||
        TryGuest<32, true>(warps, pad, host152bar, Launch::kGraphPdl)) {
      return 1;
    }
  }
  std::printf("-- guest with 1 KB of dynamic shared memory (as the merge)\n");
  for (int warps : {2, 4}) {
    if (TryGuest<32>(warps, pad, host152, Launch::kOwnStream, 1024) ||
        TryGuest<32>(warps, pad, host152, Launch::kPdl, 1024) ||
        TryGuest<32>(warps, pad, host152, Launch::kGraphPdl, 1024)) {
      return 1;
    }
  }
  std::printf("-- the same, the guest asking for the largest carveout\n");
  for (int warps : {2, 4}) {
    if (TryGuest<32>(warps, pad, host152, Launch::kPdl, 1024, 100) ||
        TryGuest<32>(warps, pad, host152, Launch::kGraphPdl, 1024, 100)) {
      return 1;
    }
  }
  std::printf("-- host itself a programmatic dependent (waiting) of a short kernel, in a graph\n");
  auto host152wait = Host<142, false, true>;
  CHECK(cudaFuncSetAttribute(host152wait, cudaFuncAttributeMaxDynamicSharedMemorySize, pad));
  for (int warps : {2, 4}) {
    if (TryGuest<32>(warps, pad, host152wait, Launch::kChainPdl) ||
        TryGuest<32>(warps, pad, host152wait, Launch::kChainPdl, 1024)) {
      return 1;
    }
  }
  std::printf("-- host without the shared-memory pad\n");
  for (int warps : {2, 4, 8}) {
    if (TryGuest<24>(warps, 0, host152)) return 1;
  }
  return 0;
}
