// A 64-bit checksum of bytes that live in GPU memory, for KV that moves GPU to GPU (a sequence's
// packed pages handed from a prefill GPU to a decode GPU, services/*/gpu_*_device.cc).
//
// kvformat blocks carry XXH3-64, a sequential hash: one stream per buffer, so on a GPU one thread
// would walk a whole buffer. This checksum is a sum of independently mixed 8-byte words, so a
// grid of threads computes it in one pass at memory speed and the CPU gets the same value:
//
//   word_i   = bytes [8i, 8i + 8) as a little-endian uint64, the last one zero-padded
//   checksum = Fmix64(n_bytes ^ sum_i Fmix64(word_i + (i + 1) * kByteChecksumStep))   (mod 2^64)
//
// Fmix64 is MurmurHash3's 64-bit finaliser, a bijection, so changing any one word always changes
// its term; the index in each term makes moved or swapped words count. It detects corruption
// (bit flips, truncation, stale or misplaced bytes); it is not a cryptographic MAC.
// Plain C++ (no CUDA, no Abseil): the CUDA entry is byte_checksum_cuda.h.
#ifndef OSCARKV_KERNELS_CHECKSUM_BYTE_CHECKSUM_H_
#define OSCARKV_KERNELS_CHECKSUM_BYTE_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

namespace oscarkv::kernels {

inline constexpr uint64_t kByteChecksumStep = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio

#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint64_t Fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// The term of word i (0-based).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint64_t ByteChecksumTerm(uint64_t word, uint64_t i) {
  return Fmix64(word + (i + 1) * kByteChecksumStep);
}

// The checksum from the sum of all terms and the length.
inline uint64_t ByteChecksumFinish(uint64_t term_sum, uint64_t bytes) {
  return Fmix64(bytes ^ term_sum);
}

// CPU reference, also the CPU path (host memory). `data` may be null when bytes == 0.
uint64_t ByteChecksumRef(const void* data, size_t bytes);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_CHECKSUM_BYTE_CHECKSUM_H_
