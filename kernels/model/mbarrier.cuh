// Shared-memory mbarriers and bulk (TMA-engine) copies from global to shared memory, sm_90: the
// producer/consumer handshake of the Hopper prefill attention (prefill_attention_sm90.cu).
#ifndef OSCARKV_KERNELS_MODEL_MBARRIER_CUH_
#define OSCARKV_KERNELS_MODEL_MBARRIER_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace oscarkv::kernels::mbarrier {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// One thread initialises; a barrier (and FenceInit) must follow before other threads use it.
__device__ __forceinline__ void Init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(bar)), "r"(arrivals)
               : "memory");
}
// Makes the initialisations visible to the async proxy (the bulk copies' complete_tx).
__device__ __forceinline__ void FenceInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void Arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SharedAddress(bar)) : "memory");
}
// Arrives and expects `bytes` more from complete_tx before the phase can complete.
__device__ __forceinline__ void ArriveExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void Wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = SharedAddress(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory by the
// copy engine; completion counts the bytes on `bar`.
__device__ __forceinline__ void BulkCopy(uint32_t dst_shared, const void* src, uint32_t bytes,
                                         uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst_shared),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}

}  // namespace oscarkv::kernels::mbarrier

#endif  // OSCARKV_KERNELS_MODEL_MBARRIER_CUH_
