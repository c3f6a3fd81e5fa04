// Dequantisation of per-token INT2 segments (kvformat SegmentKind::kInt2PerToken) into f32 rows:
// the stored form of K or V that a chunked prefill attends to. The layout is the one KvQuantRef /
// KvQuantCuda write (kv_quant_ref.h, KvQuantParams with kind kInt2PerToken: head h's segment at
// output + h * output_head_stride), so quantise -> dequantise round-trips on either side.
//
// Values equal quant::DecodePerTokenRow (lib/quant/three_tier_cache.h) bit for bit:
//   x_hat = float(code) * float(scale_fp16) + float(min_fp16), one multiply then one add, each
// rounded (kv_quant_ref.h's DequantizeInt2), the fp16 params widened exactly. Channel c of a row
// has its code in byte c % (D/4), quarter c / (D/4) (quartered packing, int2_block.h).
// The CUDA entry is in int2_dequant_cuda.h; this header is plain C++ (no CUDA, no Abseil).
#ifndef OSCARKV_KERNELS_QUANT_INT2_DEQUANT_H_
#define OSCARKV_KERNELS_QUANT_INT2_DEQUANT_H_

#include <cstdint>

namespace oscarkv::kernels {

struct DequantInt2Params {
  // Head h's kInt2PerToken segment at segments + h * segment_head_stride: codes [tokens][D/4] u8
  // at SegmentCodesOffset, then [tokens] Int2Params at SegmentParamsOffset (block_layout.h, with
  // this `tokens`).
  const uint8_t* segments = nullptr;
  int64_t segment_head_stride = 0;  // bytes; >= SegmentBytes(kInt2PerToken, tokens, D) if heads > 1
  int tokens = 0;                   // T >= 0
  int heads = 0;                    // H_kv > 0
  int head_dim = 0;                 // D: 64 or 128
  // [tokens][heads][D] f32: token t, head h, channel c at out[t * out_row_stride + h * D + c].
  float* out = nullptr;
  int64_t out_row_stride = 0;  // floats between tokens, >= heads * D
};

// CPU reference: plain loops over host pointers. Writes only the [tokens][heads][D] values (the
// padding of out_row_stride is left alone). Arguments are not checked.
void DequantInt2PerTokenRef(const DequantInt2Params& params);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_QUANT_INT2_DEQUANT_H_
