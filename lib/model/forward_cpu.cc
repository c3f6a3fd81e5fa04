#include "lib/model/forward_cpu.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace oscarkv::model {

void SetCpuThreads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

std::string CpuBlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

void Linear(const float* x, const float* w, const float* bias, int64_t t, int64_t in, int64_t out,
            float* y) {
  if (t == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, out, in, 1.0f, x, in, w, in, 0.0f, y,
                out);
  }
  if (bias != nullptr) {
    for (int64_t r = 0; r < t; ++r) {
      float* yr = y + r * out;
      for (int64_t j = 0; j < out; ++j) yr[j] += bias[j];
    }
  }
}

void RmsNormTo(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
               float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * inv * weight[i];
  }
}

void RmsNorm(float* x, const float* weight, int64_t rows, int64_t n, float eps) {
  RmsNormTo(x, weight, rows, n, eps, x);
}

void ApplyRope(float* x, int num_heads, int head_dim, int rope_dim, int64_t position,
               double theta, double scale, const float* freq_div, RopeStyle style) {
  const int half = rope_dim / 2;
  const double pos = static_cast<double>(position) / scale;
  // Angles are computed in double: at 8k positions float angles lose ~1e-3 rad.
  float cs[256], sn[256];
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(theta, -2.0 * i / rope_dim);
    if (freq_div != nullptr) freq /= freq_div[i];
    const double a = pos * freq;
    cs[i] = static_cast<float>(std::cos(a));
    sn[i] = static_cast<float>(std::sin(a));
  }
  for (int h = 0; h < num_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int i0 = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
      const int i1 = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
      const float a = xh[i0], b = xh[i1];
      xh[i0] = a * cs[i] - b * sn[i];
      xh[i1] = a * sn[i] + b * cs[i];
    }
  }
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void PromptAttention(const float* q, const float* k, const float* v, int64_t t, int num_q_heads,
                     int num_kv_heads, int head_dim, float scale, float* out) {
  const int group = num_q_heads / num_kv_heads;
  const int64_t q_row = int64_t{num_q_heads} * head_dim;
  const int64_t kv_row = int64_t{num_kv_heads} * head_dim;
  std::vector<float> s(static_cast<size_t>(t * t));
  for (int h = 0; h < num_q_heads; ++h) {
    const int g = h / group;
    // S = scale * Q_h K_g^T  ([T, T]); only the lower triangle is used.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, head_dim, scale, q + h * head_dim,
                q_row, k + g * head_dim, kv_row, 0.0f, s.data(), t);
    for (int64_t i = 0; i < t; ++i) {
      float* si = s.data() + i * t;
      float mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, si[j]);
      float sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        si[j] = std::exp(si[j] - mx);
        sum += si[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j <= i; ++j) si[j] *= inv;
      std::fill(si + i + 1, si + t, 0.0f);
    }
    // O_h = P V_g  ([T, D]), written with the output's head stride.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, head_dim, t, 1.0f, s.data(), t,
                v + g * head_dim, kv_row, 0.0f, out + h * head_dim, q_row);
  }
}

}  // namespace oscarkv::model
