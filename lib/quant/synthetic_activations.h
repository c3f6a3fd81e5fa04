// Synthetic post-RoPE-like activations for reports, benchmarks and tests when no model dump is
// at hand: heavy-tailed (Student-t, 3 dof) rows with a planted covariance,
//   x = z * diag(sqrt(lambda)) * B^T  (+ a constant offset on a few K channels, like a K bias),
// where B is a seeded random orthogonal basis per tensor and lambda decays geometrically.
// Q and K share most of their dominant directions (so qqt differs from ktk but is related),
// V has its own basis. Deterministic in `seed`.
#ifndef OSCARKV_LIB_QUANT_SYNTHETIC_ACTIVATIONS_H_
#define OSCARKV_LIB_QUANT_SYNTHETIC_ACTIVATIONS_H_

#include <cstdint>

#include "lib/quant/activation_dump.h"

namespace oscarkv::quant {

// q [tokens][q_heads][D], k and v [tokens][kv_heads][D]. q_heads % kv_heads == 0, D > 0.
LayerActivations SyntheticActivations(int tokens, int q_heads, int kv_heads, int head_dim,
                                      uint32_t seed);

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_SYNTHETIC_ACTIVATIONS_H_
