// GPU byte checksum (ByteChecksumCuda) against its CPU reference (ByteChecksumRef, checked
// against known answers in CI): random buffers from 0 bytes to 64 MiB + 5 (tails of every length
// mod 16, 8- but not 16-byte aligned starts), then one flipped byte in device memory must change
// it, and bad arguments are refused. Exit 0 = pass, 1 = fail, 77 = no GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/checksum/byte_checksum.h"
#include "kernels/checksum/byte_checksum_cuda.h"
#include "tests/kernels/gpu_test_util.h"

namespace oscarkv {
namespace {

int g_failures = 0;

void Report(bool ok, const std::string& name, const std::string& detail) {
  std::printf("%s %s %s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.c_str());
  if (!ok) ++g_failures;
}

void CheckSize(size_t bytes, size_t start, std::mt19937_64& rng, uint64_t* scratch) {
  std::vector<unsigned char> host(start + bytes);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  unsigned char* d = testing::ToDevice(host);
  uint64_t got = 0;
  const cudaError_t e = kernels::ByteChecksumCuda(d + start, bytes, scratch, nullptr, &got);
  const uint64_t want = kernels::ByteChecksumRef(host.data() + start, bytes);
  const std::string name = "size " + std::to_string(bytes) + " offset " + std::to_string(start);
  Report(e == cudaSuccess && got == want, name,
         e != cudaSuccess ? cudaGetErrorString(e) : "");
  if (bytes > 0) {
    const size_t at = start + rng() % bytes;
    const unsigned char flipped = host[at] ^ 0x10;
    GPU_CHECK(cudaMemcpy(d + at, &flipped, 1, cudaMemcpyHostToDevice));
    uint64_t after = 0;
    GPU_CHECK(kernels::ByteChecksumCuda(d + start, bytes, scratch, nullptr, &after));
    Report(after != got, name + " one byte flipped", "");
  }
  GPU_CHECK(cudaFree(d));
}

}  // namespace
}  // namespace oscarkv

int main(int argc, char** argv) {
  using namespace oscarkv;
  if (!testing::HaveGpu()) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  const bool small = argc > 1 && std::string(argv[1]) == "--small";
  std::mt19937_64 rng(2026);
  uint64_t* scratch = nullptr;
  GPU_CHECK(cudaMalloc(&scratch, sizeof(uint64_t)));
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16},
                       size_t{17}, size_t{4096}, size_t{4096 * 33 + 9}}) {
    CheckSize(bytes, 0, rng, scratch);
    CheckSize(bytes, 8, rng, scratch);  // 8- but not 16-byte aligned
  }
  if (!small) {
    CheckSize((size_t{64} << 20) + 5, 0, rng, scratch);
    CheckSize(size_t{3} << 20, 8, rng, scratch);
  }
  uint64_t out = 0;
  Report(kernels::ByteChecksumCuda(reinterpret_cast<const char*>(scratch) + 1, 8, scratch, nullptr,
                                   &out) == cudaErrorInvalidValue,
         "unaligned data refused", "");
  Report(kernels::ByteChecksumCuda(nullptr, 8, scratch, nullptr, &out) == cudaErrorInvalidValue,
         "null data refused", "");
  GPU_CHECK(cudaFree(scratch));
  std::printf("%s: %d failure(s)\n", g_failures == 0 ? "ALL PASS" : "FAILED", g_failures);
  return g_failures == 0 ? 0 : 1;
}
