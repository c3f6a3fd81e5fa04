// exp over float arrays through glibc's vector math library (libmvec), 16, 8 or 4 lanes by the
// CPU's features, picked once. What sampling and logprobs spend most of a token on: Σ exp over a
// 49,152-logit row took 42 µs through it against 176 µs with Eigen's SSE2 exp on the AVX-512
// dev VM (bench/engine/exp_probe.cc; bench/model/NOTES.md "Session 37"). Within a few ulp of
// expf; exp(-inf) = 0.
#ifndef OSCARKV_LIB_ENGINE_VECTOR_EXP_H_
#define OSCARKV_LIB_ENGINE_VECTOR_EXP_H_

#include <span>

namespace oscarkv::engine {

// out[i] = exp((x[i] − shift) × scale). Requires out.size() == x.size(); x and out may alias.
void ExpShifted(std::span<const float> x, float shift, float scale, std::span<float> out);

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_VECTOR_EXP_H_
