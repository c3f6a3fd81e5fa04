// Whether two machines' OpenBLAS kernels give the same float bits (one input of a calibration's
// bytes, docs/DECISIONS.md 2026-12-07): runs cblas_sgemm on the CPU forward's shapes
// (SmolLM2-135M, 2048-token windows) over fixed pseudo-random inputs and prints OpenBLAS's kernel
// family and a hash of each product. Same hashes on two machines under one OPENBLAS_CORETYPE: same
// bits for these products (an AMD EPYC and an Intel Xeon agreed on the five NT products under
// Haswell kernels, bench/e2e/results/session42/; the NN product came later, not yet compared).
// The GPU machine's environment sets OPENBLAS_CORETYPE=Haswell; unset it to see its own choice.
// Build: g++ -O2 -std=c++20 -I/usr/include/x86_64-linux-gnu/openblas-pthread
//          scripts/device/blas_kernels_probe.cc -lopenblas -o blas_kernels_probe
// Run:   OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=1 ./blas_kernels_probe
#include <cblas.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

std::vector<float> Fill(int64_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (float& x : v) {  // splitmix64 -> [-1, 1)
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x = static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }
  return v;
}

uint64_t Fnv1a(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

int main() {
  std::printf("OpenBLAS %s, kernels %s\n", openblas_get_config(), openblas_get_corename());
  // y[t, out] = x[t, in] W[out, in]^T as forward_cpu.cc's Linear; then the attention's q k^T.
  const int shapes[][3] = {{2048, 576, 576}, {2048, 576, 192}, {2048, 576, 1536},
                           {2048, 1536, 576}, {2048, 64, 2048}};
  int i = 0;
  for (const auto& s : shapes) {
    const int t = s[0], in = s[1], out = s[2];
    const std::vector<float> x = Fill(int64_t{t} * in, 11 + i), w = Fill(int64_t{out} * in, 97 + i);
    std::vector<float> y(int64_t{t} * out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, out, in, 1.0f, x.data(), in, w.data(),
                in, 0.0f, y.data(), out);
    std::printf("sgemm t=%d in=%d out=%d: %016llx\n", t, in, out,
                static_cast<unsigned long long>(Fnv1a(y)));
    ++i;
  }
  // The attention's P V (PromptAttention): [t, t] x [t, 64] not transposed, K = t = 2048, output
  // rows 576 floats apart.
  const int t = 2048, d = 64, ld = 576;
  const std::vector<float> p = Fill(int64_t{t} * t, 5), v = Fill(int64_t{t} * ld, 7);
  std::vector<float> o(int64_t{t} * ld);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, 1.0f, p.data(), t, v.data(), ld,
              0.0f, o.data(), ld);
  std::printf("sgemm NN t=%d k=%d d=%d: %016llx\n", t, t, d,
              static_cast<unsigned long long>(Fnv1a(o)));
  return 0;
}
