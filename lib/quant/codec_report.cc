#include "lib/quant/codec_report.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace oscarkv::quant {

absl::StatusOr<ReconstructionError> MeasureReconstruction(const Codec& codec, KvSide side,
                                                          std::span<const float> x, int tokens,
                                                          int heads) {
  const int d = codec.head_dim();
  if (tokens < 32 || heads <= 0 || x.size() != static_cast<size_t>(tokens) * heads * d) {
    return absl::InvalidArgumentError(
        absl::StrCat("reconstruction: need >= 32 tokens and ", tokens, " x ", heads, " x ", d,
                     " floats, got ", x.size()));
  }
  const int t_count = tokens / 32 * 32;
  const size_t row = static_cast<size_t>(heads) * d;
  const bool key = side == KvSide::kKey;
  std::vector<float> xr(x.begin(), x.begin() + t_count * row);
  OSCARKV_RETURN_IF_ERROR(key ? codec.RotateKey(xr) : codec.RotateValue(xr));
  std::vector<float> norms;
  if (key && codec.uses_token_norms()) {
    norms.resize(t_count);
    OSCARKV_RETURN_IF_ERROR(codec.ComputeTokenNorms(xr, t_count, heads, norms));
  }
  std::vector<float> rows(static_cast<size_t>(t_count) * d), back(rows.size());
  std::vector<uint8_t> seg(codec.SegmentBytes(side, t_count));
  double err2 = 0, ref2 = 0, max_abs = 0, cos_sum = 0;
  for (int h = 0; h < heads; ++h) {
    for (int t = 0; t < t_count; ++t) {
      std::copy_n(&xr[t * row + static_cast<size_t>(h) * d], d, &rows[static_cast<size_t>(t) * d]);
    }
    OSCARKV_RETURN_IF_ERROR(codec.EncodeSegment(side, rows, t_count, norms, seg));
    OSCARKV_RETURN_IF_ERROR(codec.DecodeSegment(side, seg, t_count, norms, back));
    OSCARKV_RETURN_IF_ERROR(key ? codec.UnrotateKey(back) : codec.UnrotateOutput(back));
    for (int t = 0; t < t_count; ++t) {
      double dot = 0, nx = 0, ny = 0;
      for (int i = 0; i < d; ++i) {
        const double a = x[t * row + static_cast<size_t>(h) * d + i];
        const double b = back[static_cast<size_t>(t) * d + i];
        err2 += (a - b) * (a - b);
        ref2 += a * a;
        max_abs = std::max(max_abs, std::fabs(a - b));
        dot += a * b;
        nx += a * a;
        ny += b * b;
      }
      cos_sum += (nx > 0 && ny > 0) ? dot / std::sqrt(nx * ny) : (nx == ny ? 1.0 : 0.0);
    }
  }
  ReconstructionError out;
  out.tokens = t_count;
  out.rel_frobenius = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  out.max_abs = max_abs;
  out.mean_cosine = cos_sum / (static_cast<double>(t_count) * heads);
  out.bits_per_element = SegmentBitsPerElement(codec.segment_kind(side), 64, d);
  return out;
}

}  // namespace oscarkv::quant
