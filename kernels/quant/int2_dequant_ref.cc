// CPU reference of the per-token INT2 dequantisation; see int2_dequant.h.
#include "kernels/quant/int2_dequant.h"

#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/block_layout.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {

void DequantInt2PerTokenRef(const DequantInt2Params& p) {
  constexpr kvformat::SegmentKind kKind = kvformat::SegmentKind::kInt2PerToken;
  const int d = p.head_dim, m = d / 4;
  const size_t codes_at = kvformat::SegmentCodesOffset(kKind, p.tokens, d);
  const size_t params_at = kvformat::SegmentParamsOffset(kKind, p.tokens, d);
  for (int h = 0; h < p.heads; ++h) {
    const uint8_t* segment = p.segments + h * p.segment_head_stride;
    for (int t = 0; t < p.tokens; ++t) {
      const uint8_t* codes = segment + codes_at + static_cast<size_t>(t) * m;
      // Int2Params little-endian, scale then min (int2_block.h).
      const uint8_t* raw =
          segment + params_at + static_cast<size_t>(t) * sizeof(kvformat::Int2Params);
      const kvformat::Int2Params params{static_cast<uint16_t>(raw[0] | (raw[1] << 8)),
                                        static_cast<uint16_t>(raw[2] | (raw[3] << 8))};
      float* row = p.out + t * p.out_row_stride + static_cast<int64_t>(h) * d;
      for (int j = 0; j < m; ++j) {
        for (int q = 0; q < 4; ++q) {
          row[j + q * m] = DequantizeInt2(kvformat::UnpackCrumb(codes[j], q), params);
        }
      }
    }
  }
}

}  // namespace oscarkv::kernels
