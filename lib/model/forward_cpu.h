// CPU building blocks of the forward pass. Pure functions over row-major float32 buffers;
// Linear uses OpenBLAS (its own thread pool, see SetCpuThreads). Thread-compatible.
#ifndef OSCARKV_LIB_MODEL_FORWARD_CPU_H_
#define OSCARKV_LIB_MODEL_FORWARD_CPU_H_

#include <cstdint>
#include <string>

#include "lib/model/model_config.h"

namespace oscarkv::model {

// Threads used by the CPU forward (OpenBLAS and our own loops). Default: OpenBLAS's default.
void SetCpuThreads(int threads);

// The CPU kernel family OpenBLAS chose at load (e.g. "Haswell", "Zen", "SkylakeX"; the
// OPENBLAS_CORETYPE environment variable overrides it). Float results, calibrations included,
// can differ in the last bits between families.
std::string CpuBlasCoreName();

// y[T, out] = x[T, in] W[out, in]^T (+ bias[out] when non-null).
void Linear(const float* x, const float* w, const float* bias, int64_t t, int64_t in, int64_t out,
            float* y);

// In place, each of `rows` rows of `n`: x = x / sqrt(mean(x^2) + eps) * weight.
void RmsNorm(float* x, const float* weight, int64_t rows, int64_t n, float eps);
// out = RmsNorm(x) without touching x.
void RmsNormTo(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out);

// Rotates the first `rope_dim` dims of each of `num_heads` heads of one token at `position`.
// Pair i (i < rope_dim/2) has angle position / scale * theta^(-2i/rope_dim) / freq_div[i]
// (freq_div may be null); kAdjacentPairs rotates (x[2i], x[2i+1]), kNeox (x[i], x[i+rope_dim/2]).
void ApplyRope(float* x, int num_heads, int head_dim, int rope_dim, int64_t position,
               double theta, double scale, const float* freq_div, RopeStyle style);

// x[i] = silu(gate[i]) * up[i] written into gate, for n elements.
void SiluMul(float* gate, const float* up, int64_t n);

// Causal attention over a whole prompt: q [T, Hq, D], k/v [T, Hkv, D] (already rounded as the
// caller wants), out [T, Hq, D]; query head h reads KV head h / (Hq / Hkv).
void PromptAttention(const float* q, const float* k, const float* v, int64_t t, int num_q_heads,
                     int num_kv_heads, int head_dim, float scale, float* out);

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_FORWARD_CPU_H_
