// Vectorised checks over logits rows shared by sampling and logprobs (Eigen, private to
// lib/engine: include only from its .cc files).
#ifndef OSCARKV_LIB_ENGINE_FINITE_ROWS_H_
#define OSCARKV_LIB_ENGINE_FINITE_ROWS_H_

#include <span>

#include <Eigen/Core>

namespace oscarkv::engine {

// Whether every value is finite: a model's logits are, and then the vectorised paths apply.
// (x − x is 0 only for finite x.)
inline bool AllFinite(std::span<const float> x) {
  const Eigen::Map<const Eigen::ArrayXf> all(x.data(), static_cast<Eigen::Index>(x.size()));
  return (all - all).sum() == 0.0f;
}

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_FINITE_ROWS_H_
