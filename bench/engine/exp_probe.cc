// Standalone probe behind bench/model/NOTES.md "Session 35" and "Session 37": the cost of the
// passes of a log-softmax normaliser over one 49,152-logit row (N(0, 3)) — max, then Σ exp —
// as scalar loops (glibc expf, which does not vectorise without -ffast-math), as Eigen array
// expressions, with and without the isfinite select, and through engine::ExpShifted (libmvec,
// the lanes picked at run time). Not part of the CMake build: its point is comparing the same
// source under different target flags, which one binary cannot do (see the notes). Run:
//   g++ -O2 -std=c++20 -I. -I/usr/include/eigen3 bench/engine/exp_probe.cc \
//       lib/engine/vector_exp.cc -lmvec -o /tmp/p && /tmp/p
//   g++ -O2 -mavx2 -mfma -std=c++20 -I. -I/usr/include/eigen3 bench/engine/exp_probe.cc \
//       lib/engine/vector_exp.cc -lmvec -o /tmp/p_avx2 && /tmp/p_avx2
#include <Eigen/Core>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "lib/engine/vector_exp.h"

int main() {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0, 3);
  std::vector<float> l(49152);
  for (float& x : l) x = d(rng);
  const Eigen::Map<const Eigen::ArrayXf> a(l.data(), static_cast<Eigen::Index>(l.size()));
  auto time = [](const char* name, auto f) {
    constexpr int kReps = 2000;
    double sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) sink += f();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-28s %7.1f us a row (%g)\n", name, us / kReps, sink);
  };
  time("max, scalar with isfinite", [&] {
    float m = -INFINITY;
    for (float x : l) m = std::max(m, std::isfinite(x) ? x : -INFINITY);
    return double{m};
  });
  time("max, Eigen with select",
       [&] { return double{a.isFinite().select(a, -INFINITY).maxCoeff()}; });
  time("max, Eigen", [&] { return double{a.maxCoeff()}; });
  time("sum exp, scalar expf", [&] {
    double s = 0;
    for (float x : l) s += std::exp(x - 9.f);
    return s;
  });
  time("sum exp, Eigen with select", [&] {
    return double{a.isFinite().select(a - 9.f, -INFINITY).exp().sum()};
  });
  time("sum exp, Eigen", [&] { return double{(a - 9.f).exp().sum()}; });
  std::vector<float> e(l.size());
  time("sum exp, ExpShifted (libmvec)", [&] {
    oscarkv::engine::ExpShifted(l, 9.f, 1.f, e);
    const Eigen::Map<const Eigen::ArrayXf> exps(e.data(), static_cast<Eigen::Index>(e.size()));
    return double{exps.sum()};
  });
}
