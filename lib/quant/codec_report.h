// Reconstruction error of a codec on a K or V tensor, in the original (unrotated) basis: what
// `oscarkv codecs report` prints, reusable by evaluation code.
#ifndef OSCARKV_LIB_QUANT_CODEC_REPORT_H_
#define OSCARKV_LIB_QUANT_CODEC_REPORT_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "lib/quant/codec.h"

namespace oscarkv::quant {

struct ReconstructionError {
  int tokens = 0;              // tokens measured (the input's, rounded down to a multiple of 32)
  double rel_frobenius = 0;    // ||x - x_hat||_F / ||x||_F over all tokens and heads
  double max_abs = 0;          // max |x - x_hat|
  double mean_cosine = 0;      // mean over (token, head) rows of cos(x, x_hat)
  double bits_per_element = 0; // of this side's history segment (kvformat::SegmentBytes)
};

// Rotates, [token-normalises], encodes and decodes every head of `x` ([tokens][heads][D] f32,
// unrotated) with `codec` as side `side` (every token quantized: no windows), un-rotates and
// compares with `x`. kInvalidArgument when fewer than 32 tokens or sizes mismatch.
absl::StatusOr<ReconstructionError> MeasureReconstruction(const Codec& codec, KvSide side,
                                                          std::span<const float> x, int tokens,
                                                          int heads);

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_CODEC_REPORT_H_
