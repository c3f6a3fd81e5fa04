// SplitMix64 (Steele, Lea and Flood, OOPSLA 2014) as a counter-based generator: Mix of
// (key + i * kSplitMix64Increment) for i = 1, 2, ... passes BigCrush, so a draw can be keyed by
// what it is for (a seed and a token index, a seed and a choice) instead of by a stream's state.
#ifndef OSCARKV_LIB_BASE_SPLITMIX64_H_
#define OSCARKV_LIB_BASE_SPLITMIX64_H_

#include <cstdint>

namespace oscarkv {

inline constexpr uint64_t kSplitMix64Increment = 0x9E3779B97F4A7C15ull;

// SplitMix64's output function: a bijection of 64-bit words.
constexpr uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace oscarkv

#endif  // OSCARKV_LIB_BASE_SPLITMIX64_H_
