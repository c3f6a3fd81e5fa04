#include "lib/quant/synthetic_activations.h"

#include <cmath>
#include <random>
#include <vector>

namespace oscarkv::quant {
namespace {

// Seeded random orthogonal d x d (Gram-Schmidt on Gaussian columns), row-major.
std::vector<double> RandomBasis(int d, std::mt19937& rng) {
  std::normal_distribution<double> n01;
  std::vector<double> m(static_cast<size_t>(d) * d);
  for (double& v : m) v = n01(rng);
  for (int j = 0; j < d; ++j) {
    for (int k = 0; k < j; ++k) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += m[i * d + j] * m[i * d + k];
      for (int i = 0; i < d; ++i) m[i * d + j] -= dot * m[i * d + k];
    }
    double nrm = 0;
    for (int i = 0; i < d; ++i) nrm += m[i * d + j] * m[i * d + j];
    nrm = std::sqrt(nrm);
    for (int i = 0; i < d; ++i) m[i * d + j] /= nrm;
  }
  return m;
}

void Fill(std::vector<float>* out, int rows, int d, const std::vector<double>& basis,
          const std::vector<double>& sqrt_lambda, const std::vector<double>& offset,
          std::mt19937& rng) {
  std::student_t_distribution<double> t3(3.0);
  out->resize(static_cast<size_t>(rows) * d);
  std::vector<double> z(d);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < d; ++i) z[i] = t3(rng) * sqrt_lambda[i];
    for (int j = 0; j < d; ++j) {
      double acc = offset[j];
      for (int i = 0; i < d; ++i) acc += z[i] * basis[j * d + i];
      (*out)[static_cast<size_t>(r) * d + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace

LayerActivations SyntheticActivations(int tokens, int q_heads, int kv_heads, int head_dim,
                                      uint32_t seed) {
  const int d = head_dim;
  std::mt19937 rng(seed);
  const std::vector<double> bq = RandomBasis(d, rng);
  std::vector<double> bk = RandomBasis(d, rng);
  // K shares Q's 8 strongest directions (the last columns) with a small perturbation.
  for (int j = d - 8; j < d; ++j) {
    for (int i = 0; i < d; ++i) bk[i * d + j] = bq[i * d + j];
  }
  bk = [&] {  // re-orthonormalise after the copy
    std::vector<double> m = bk;
    for (int j = 0; j < d; ++j) {
      for (int k = 0; k < j; ++k) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += m[i * d + j] * m[i * d + k];
        for (int i = 0; i < d; ++i) m[i * d + j] -= dot * m[i * d + k];
      }
      double nrm = 0;
      for (int i = 0; i < d; ++i) nrm += m[i * d + j] * m[i * d + j];
      for (int i = 0; i < d; ++i) m[i * d + j] /= std::sqrt(nrm);
    }
    return m;
  }();
  const std::vector<double> bv = RandomBasis(d, rng);
  std::vector<double> sl_q(d), sl_k(d), sl_v(d);
  for (int i = 0; i < d; ++i) {
    const double x = static_cast<double>(i) / d;  // ascending: strongest directions last
    sl_q[i] = std::sqrt(0.05 + 4.0 * std::pow(400.0, x - 1.0));
    sl_k[i] = std::sqrt(0.02 + 6.0 * std::pow(1000.0, x - 1.0));
    sl_v[i] = std::sqrt(0.05 + 1.0 * std::pow(50.0, x - 1.0));
  }
  std::vector<double> zero(d, 0.0), k_off(d, 0.0);
  for (int j = 3; j < d; j += d / 4) k_off[j] = 6.0;  // a few large constant K channels
  LayerActivations a;
  a.tokens = tokens;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.head_dim = d;
  Fill(&a.q, tokens * q_heads, d, bq, sl_q, zero, rng);
  Fill(&a.k, tokens * kv_heads, d, bk, sl_k, k_off, rng);
  Fill(&a.v, tokens * kv_heads, d, bv, sl_v, zero, rng);
  return a;
}

}  // namespace oscarkv::quant
