// Shared device helpers of kernels/: CUDA error propagation, warp-level MMA wrappers, and the
// bit tricks that turn packed INT2 codes (lib/kvformat/int2_block.h, quartered packing) into
// 16-bit MMA operands without a lookup table.
//
// INT2 -> MMA operand trick: a code c in {0,1,2,3} left in bits [2q+1:2q] of an fp16 whose
// other bits are zero is the subnormal c * 2^(2q-24), exact. So one AND of a packed word with
// 0x00030003 << 2q yields two fp16 operands of quarter q (no shifts, no conversions); the power of
// two 2^(2q-24) is folded into the other operand or the accumulator's scale.
#ifndef OSCARKV_KERNELS_COMMON_CUDA_UTILS_CUH_
#define OSCARKV_KERNELS_COMMON_CUDA_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

// Returns the cudaError_t of `expr` from the enclosing function when it is not cudaSuccess.
#define OSCARKV_CUDA_RETURN_IF_ERROR(expr)        \
  do {                                            \
    const cudaError_t oscarkv_cuda_err_ = (expr); \
    if (oscarkv_cuda_err_ != cudaSuccess) return oscarkv_cuda_err_; \
  } while (0)

namespace oscarkv::kernels::cuda {

// SMs of the current device (host side; launchers size their grids by it).
inline cudaError_t CurrentDeviceSms(int* sms) {
  int device = 0;
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
}

// ---- bf16 / fp16 packing ----
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// The two fp16 of x times the two fp16 of s (one HMUL2).
__device__ __forceinline__ uint32_t MulHalf2(uint32_t x, uint32_t s) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&x),
                            *reinterpret_cast<const __half2*>(&s));
  return *reinterpret_cast<const uint32_t*>(&r);
}
__device__ __forceinline__ float Bf16LoToFloat(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float Bf16HiToFloat(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ float Bf16BitsToFloatDev(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ __forceinline__ float HalfLoToFloat(uint32_t v) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(v & 0xffffu)));
}
__device__ __forceinline__ float HalfHiToFloat(uint32_t v) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(v >> 16)));
}
__device__ __forceinline__ float HalfBitsToFloatDev(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// 2^x on the SFU alone (ex2.approx.ftz: ~2 ulp; 2^-inf = +0; results below 2^-126 flush to 0,
// where exp2f adds a range fix-up of 3 instructions to keep them subnormal).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- INT2 unpack (quartered packing: byte j of a row holds channels j, j+D/4, j+D/2, j+3D/4 in
// bits [1:0], [3:2], [5:4], [7:6]) ----

// Scalar code of quarter q in a packed byte.
__device__ __forceinline__ uint32_t Crumb(uint32_t byte, int quarter) {
  return (byte >> (2 * quarter)) & 3u;
}
// Byte b of x to byte position 0 and byte b of z to byte position 2 (the low byte of each fp16
// half); the other bytes are garbage that the quarter mask clears.
__device__ __forceinline__ uint32_t BytesTo02(uint32_t x, uint32_t z, int b) {
  return __byte_perm(x, z, static_cast<uint32_t>(b | ((4 + b) << 8)));
}

// ---- Warp MMA (sm_80+ mma.sync; fine on sm_90) ----
// D = A * B + D, m16n8k16, A row-major bf16 (4 regs), B col-major bf16 (2 regs), f32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaHalf(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// D = A * B + D, m16n8k32, A row-major u8 (4 regs of 4), B col-major s8 (2 regs of 4), s32
// accumulators (exact).
__device__ __forceinline__ void MmaU8S8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Transposes an 8x8 matrix of 16-bit elements held in the mma accumulator layout (lane l holds
// row l/4, columns 2(l%4), 2(l%4)+1).
__device__ __forceinline__ uint32_t MoveMatrixTrans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}
// ldmatrix.trans of two 8x8 b16 matrices from shared memory (32-bit shared-window addresses;
// lane 8 i + j gives row j of matrix i, i < 2): lane (r, p) gets column r of rows 2p (low half)
// and 2p + 1 (high half) of each matrix. Volatile: kept after the cp.async wait that guards the
// data (the compiler does not see the asm read memory).
__device__ __forceinline__ void LoadMatrixX2Trans(uint32_t smem, uint32_t& d0, uint32_t& d1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(d0), "=r"(d1)
               : "r"(smem));
}

// Streaming loads that do not pollute L1 (KV is read once per launch).
template <typename T>
__device__ __forceinline__ T LoadNc(const T* p) {
  return __ldg(p);
}
__device__ __forceinline__ uint2 LoadStream(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t LoadStream(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 LoadStream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// LoadStream that also asks L2 to fetch the whole 256-byte block around p (L2::256B): for rows
// that a warp reads in several 64-byte pieces, one DRAM request per block instead of one per
// piece (demotion: -0.25...2%, bench/NOTES.md "Demotion v7").
__device__ __forceinline__ uint4 LoadStreamBlock(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// ---- cp.async (16-byte global -> shared, L1 bypass), for multi-stage smem rings ----
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// Hint: fetch the 128-byte line holding `p` into L2 (no register result, never faults on a valid
// address).
__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}
// Hint: fetch `bytes` (a multiple of 16) from the 16-byte aligned `p` into L2 with one bulk
// (TMA) request; no data comes back to the SM.
__device__ __forceinline__ void BulkPrefetchL2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// ---- Programmatic dependent launch (sm_90) ----
// A kernel launched by LaunchOverlappingPrior may be started while the kernel before it in the
// stream drains: its blocks take the SMs that the earlier grid's blocks leave, and hide the launch
// latency. Such a kernel calls WaitForPriorGrid before its first global memory access (the wait
// returns once the earlier grid has completed and its writes are visible; at once when there is
// none), so stream order holds for memory. AllowDependentLaunch lets the next such kernel be
// launched early; it changes nothing for kernels launched the plain way.
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WaitForPriorGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// The opening of a chained kernel (launched by LaunchOverlappingPrior, every thread calls it
// before its first global memory access): the next chained kernel may be launched at once (it
// waits for this one in turn), then this one waits for the kernel before it. A kernel that reads
// constants (weights written only at load) may read them between the two calls instead.
__device__ __forceinline__ void StartChainedKernel() {
  AllowDependentLaunch();
  WaitForPriorGrid();
}
template <class... Params, class... Args>
cudaError_t LaunchOverlappingPrior(void (*kernel)(Params...), dim3 grid, dim3 block,
                                   size_t smem_bytes, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute overlap[1] = {};
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace oscarkv::kernels::cuda

#endif  // OSCARKV_KERNELS_COMMON_CUDA_UTILS_CUH_
