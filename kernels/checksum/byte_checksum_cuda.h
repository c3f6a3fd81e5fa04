// CUDA entry of the byte checksum (byte_checksum.h): equal to ByteChecksumRef of the same bytes.
#ifndef OSCARKV_KERNELS_CHECKSUM_BYTE_CHECKSUM_CUDA_H_
#define OSCARKV_KERNELS_CHECKSUM_BYTE_CHECKSUM_CUDA_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace oscarkv::kernels {

// Checksums `bytes` bytes of device memory at `data` (8-byte aligned) on `stream` and waits for
// the result: `scratch` is 8 bytes of device memory the call may overwrite. cudaErrorInvalidValue
// for a null or unaligned `data` (with bytes > 0) or a null scratch/out; otherwise the first CUDA
// error of the launch or the copy back.
cudaError_t ByteChecksumCuda(const void* data, size_t bytes, uint64_t* scratch,
                             cudaStream_t stream, uint64_t* out);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_CHECKSUM_BYTE_CHECKSUM_CUDA_H_
