// Hopper warpgroup MMA (wgmma, sm_90a) for the prefill attention: shared-memory matrix
// descriptors for 128-byte-swizzled K-major tiles, the m64n128k16 bf16 products with the A
// operand from shared memory (SS) or registers (RS), m64n64k16 with A from registers, and the
// fences and groups around them.
//
// Tile layout (what SwizzledOffset computes and the descriptors describe): a [rows][64] bf16 block
// is rows of 128 bytes whose 16-byte chunk c sits at chunk c ^ (row % 8), in atoms of 8 rows
// (1024 bytes, 1024-aligned); a [rows][64 k] tile is k / 64 such blocks one after the other. The
// descriptor of one k16 step points 32 bytes further into the block's first row: the hardware
// applies the swizzle to the address bits, as for the tile's writers.
#ifndef OSCARKV_KERNELS_MODEL_WGMMA_CUH_
#define OSCARKV_KERNELS_MODEL_WGMMA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace oscarkv::kernels::wgmma {

// Byte offset of element (row, col) in a tile of `rows` rows stored as described above.
__device__ __forceinline__ uint32_t SwizzledOffset(int rows, int row, int col) {
  const int block = col >> 6, chunk = (col >> 3) & 7;
  return static_cast<uint32_t>(block * rows * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) +
                               ((col & 7) << 1));
}

// Descriptor of a K-major, 128-byte-swizzled operand starting at shared address `addr`:
// start address >> 4 (bits 0-13), leading byte offset (unused by this layout; 1), stride byte
// offset 1024 >> 4 (bits 32-45: from one 8-row atom to the next), layout 128B swizzle (bits 62-63
// = 1).
__device__ __forceinline__ uint64_t SmemDescriptor(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void Fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void Commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Makes this thread's generic-proxy writes to shared memory (st.shared, cp.async) visible to
// wgmma's async-proxy reads; a barrier must follow before another thread's wgmma reads them.
__device__ __forceinline__ void FenceSharedForAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The 64 accumulator operands of an m64n128 product, as asm operands %0..%63.
#define OSCARKV_WGMMA_D64(d)                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define OSCARKV_WGMMA_D64_LIST                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

// d (+)= A B, m64n128k16, bf16 operands, f32 accumulators; A and B K-major in shared memory.
// accumulate = false overwrites d (scale-d 0).
__device__ __forceinline__ void MmaSS(float (&d)[64], uint64_t a_desc, uint64_t b_desc,
                                      bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " OSCARKV_WGMMA_D64_LIST
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : OSCARKV_WGMMA_D64(d)
      : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)));
}
// d += A B, m64n128k16; A from registers (the mma.sync m16n8k16 A fragment of the warp's 16
// rows), B K-major in shared memory.
__device__ __forceinline__ void MmaRS(float (&d)[64], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " OSCARKV_WGMMA_D64_LIST
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : OSCARKV_WGMMA_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

// The 32 accumulator operands of an m64n64 product, as asm operands %0..%31.
#define OSCARKV_WGMMA_D32(d)                                                                      \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define OSCARKV_WGMMA_D32_LIST                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
// d += A B, m64n64k16, as MmaRS (head_dim 64's P V).
__device__ __forceinline__ void MmaRS(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " OSCARKV_WGMMA_D32_LIST
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : OSCARKV_WGMMA_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}
#undef OSCARKV_WGMMA_D32_LIST
#undef OSCARKV_WGMMA_D32
#undef OSCARKV_WGMMA_D64_LIST
#undef OSCARKV_WGMMA_D64

}  // namespace oscarkv::kernels::wgmma

#endif  // OSCARKV_KERNELS_MODEL_WGMMA_CUH_
