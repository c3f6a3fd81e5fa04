// Disjointness of evaluation text and calibration text (quant.md E.0 rule 4): token n-gram
// shingles hashed with XXH3-64, plus whole-file content hashes.
#ifndef OSCARKV_LIB_EVAL_TEXT_OVERLAP_H_
#define OSCARKV_LIB_EVAL_TEXT_OVERLAP_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace oscarkv::eval {

// Shingle length in tokens. Default for all checks: 8 (a repeated 8-token run is rare in
// distinct prose; Gutenberg boilerplate shared by two books shows up as a small fraction).
inline constexpr int kShingleTokens = 8;

// XXH3-64 (seed 0) of bytes.
uint64_t ContentHash(std::string_view bytes);

// Sorted, de-duplicated hashes of every `n`-token run of `tokens`.
std::vector<uint64_t> ShingleSet(std::span<const int32_t> tokens, int n = kShingleTokens);

// Fraction of the `n`-token runs of `tokens` whose hash is in `set` (sorted). 0 for fewer than
// n tokens.
double OverlapFraction(std::span<const int32_t> tokens, std::span<const uint64_t> set,
                       int n = kShingleTokens);

}  // namespace oscarkv::eval

#endif  // OSCARKV_LIB_EVAL_TEXT_OVERLAP_H_
