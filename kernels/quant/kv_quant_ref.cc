// CPU reference of the KV INT2 codecs; see kv_quant_ref.h for the math and layouts.
#include "kernels/quant/kv_quant_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "lib/kvformat/float16.h"

namespace oscarkv::kernels {
namespace {

using kvformat::Int2Params;
using kvformat::SegmentKind;

constexpr int kCg = kvformat::kChannelGroupTokens;   // 32 tokens per K channel group
constexpr int kTg = kvformat::kTokenGroupChannels;   // 32 channels per V token group

bool ShapeOk(SegmentKind kind, int tokens, int head_dim) {
  if (tokens <= 0 || head_dim <= 0 || head_dim % 32 != 0) return false;
  if (kind == SegmentKind::kInt2ChannelGroup && tokens % kCg != 0) return false;
  return true;
}

bool KindOk(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kBf16Rows:
    case SegmentKind::kInt2PerToken:
    case SegmentKind::kInt2TokenGroup:
    case SegmentKind::kInt2ChannelGroup:
      return true;
  }
  return false;
}

void StoreParams(Int2Params p, uint8_t* dst) {
  // Little-endian scale then min, exactly the in-memory Int2Params on our targets.
  dst[0] = static_cast<uint8_t>(p.scale_fp16 & 0xff);
  dst[1] = static_cast<uint8_t>(p.scale_fp16 >> 8);
  dst[2] = static_cast<uint8_t>(p.min_fp16 & 0xff);
  dst[3] = static_cast<uint8_t>(p.min_fp16 >> 8);
}
Int2Params LoadParams(const uint8_t* src) {
  Int2Params p;
  p.scale_fp16 = static_cast<uint16_t>(src[0] | (src[1] << 8));
  p.min_fp16 = static_cast<uint16_t>(src[2] | (src[3] << 8));
  return p;
}

// One row of `d` values quantized in groups of `group` contiguous channels: codes packed over the
// whole row (quartered, m = d/4) into `codes_out`, params of group g into params_out + 4*g.
void EncodeRowGroups(const float* x, int d, int group, uint8_t* codes_out, uint8_t* params_out) {
  uint8_t codes[1024];
  std::vector<uint8_t> big;
  uint8_t* c = codes;
  if (d > 1024) {
    big.resize(d);
    c = big.data();
  }
  for (int g = 0; g < d / group; ++g) {
    const Int2Params p = ComputeInt2Params(x + g * group, group);
    StoreParams(p, params_out + 4 * g);
    for (int i = 0; i < group; ++i) c[g * group + i] = QuantizeInt2(x[g * group + i], p);
  }
  PackQuartered(c, d, codes_out);
}

void DecodeRowGroups(const uint8_t* codes_in, const uint8_t* params_in, int d, int group,
                     float* x) {
  const int m = d / 4;
  for (int j = 0; j < m; ++j) {
    const uint8_t byte = codes_in[j];
    for (int q = 0; q < 4; ++q) {
      const int i = j + q * m;
      x[i] = DequantizeInt2(kvformat::UnpackCrumb(byte, q), LoadParams(params_in + 4 * (i / group)));
    }
  }
}

}  // namespace

const char* KvQuantStatusString(KvQuantStatus status) {
  switch (status) {
    case KvQuantStatus::kOk:
      return "ok";
    case KvQuantStatus::kNullPointer:
      return "null pointer";
    case KvQuantStatus::kBadShape:
      return "bad shape (tokens > 0, head_dim % 32 == 0, tokens % 32 == 0 for channel groups)";
    case KvQuantStatus::kBadSegmentKind:
      return "bad segment kind";
    case KvQuantStatus::kBadClipRatio:
      return "bad clip ratio (must be > 0)";
  }
  return "unknown";
}

int ClipIndex(float ratio, int d) {
  // int() truncation as in the Python reference; ratio >= 1 lands on d - 1 (the max, no clip).
  const double r = static_cast<double>(ratio) * d;
  const int idx = r >= d ? d - 1 : static_cast<int>(r);
  return std::min(std::max(idx, 0), d - 1);
}

float ClipThreshold(const float* x, int d, float ratio, float* scratch) {
  for (int i = 0; i < d; ++i) scratch[i] = std::fabs(x[i]);
  const int idx = ClipIndex(ratio, d);
  std::nth_element(scratch, scratch + idx, scratch + d);
  return scratch[idx];
}

void ClipRow(float* x, int d, float ratio, float* scratch) {
  if (!(ratio < 1.0f)) return;
  const float tau = ClipThreshold(x, d, ratio, scratch);
  for (int i = 0; i < d; ++i) x[i] = std::min(std::max(x[i], -tau), tau);
}

Int2Params ComputeInt2Params(const float* x, int n, ptrdiff_t stride) {
  float mn = x[0];
  float mx = x[0];
  for (int i = 1; i < n; ++i) {
    const float v = x[i * stride];
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  const float scale = std::max(mx - mn, 1e-8f) / 3.0f;
  return Int2Params{kvformat::FloatToHalfBits(scale), kvformat::FloatToHalfBits(mn)};
}

uint8_t QuantizeInt2(float x, Int2Params params) {
  const float s = kvformat::HalfBitsToFloat(params.scale_fp16);
  const float m = kvformat::HalfBitsToFloat(params.min_fp16);
  if (!(s > 0.0f)) return 0;  // range below fp16's smallest subnormal: every value decodes to m
  const float q = std::floor((x - m) / s + 0.5f);
  return static_cast<uint8_t>(std::min(std::max(q, 0.0f), 3.0f));
}

float DequantizeInt2(uint8_t code, Int2Params params) {
  return static_cast<float>(code) * kvformat::HalfBitsToFloat(params.scale_fp16) +
         kvformat::HalfBitsToFloat(params.min_fp16);
}

void PackQuartered(const uint8_t* codes, int n, uint8_t* out) {
  const int m = n / 4;
  for (int j = 0; j < m; ++j) {
    out[j] = kvformat::PackCrumbs(codes[j], codes[j + m], codes[j + 2 * m], codes[j + 3 * m]);
  }
}

void UnpackQuartered(const uint8_t* packed, int n, uint8_t* codes) {
  const int m = n / 4;
  for (int j = 0; j < m; ++j) {
    for (int q = 0; q < 4; ++q) codes[j + q * m] = kvformat::UnpackCrumb(packed[j], q);
  }
}

KvQuantStatus EncodeSegment(SegmentKind kind, const float* rows, int tokens, int head_dim,
                            ptrdiff_t row_stride, uint8_t* out) {
  if (rows == nullptr || out == nullptr) return KvQuantStatus::kNullPointer;
  if (!KindOk(kind)) return KvQuantStatus::kBadSegmentKind;
  if (!ShapeOk(kind, tokens, head_dim) || row_stride < head_dim) return KvQuantStatus::kBadShape;
  const int d = head_dim;
  switch (kind) {
    case SegmentKind::kBf16Rows:
      for (int t = 0; t < tokens; ++t) {
        for (int i = 0; i < d; ++i) {
          const uint16_t b = kvformat::FloatToBf16Bits(rows[t * row_stride + i]);
          out[2 * (t * d + i)] = static_cast<uint8_t>(b & 0xff);
          out[2 * (t * d + i) + 1] = static_cast<uint8_t>(b >> 8);
        }
      }
      break;
    case SegmentKind::kInt2PerToken:
    case SegmentKind::kInt2TokenGroup: {
      const int group = kind == SegmentKind::kInt2PerToken ? d : kTg;
      uint8_t* params = out + static_cast<size_t>(tokens) * (d / 4);
      const int params_per_row = 4 * (d / group);
      for (int t = 0; t < tokens; ++t) {
        EncodeRowGroups(rows + t * row_stride, d, group, out + static_cast<size_t>(t) * (d / 4),
                        params + static_cast<size_t>(t) * params_per_row);
      }
      break;
    }
    case SegmentKind::kInt2ChannelGroup: {
      // Per 32-token group: codes [D][8] (channel c's 32 tokens, quartered with m = 8), then
      // params [D] (one min-max pair per channel over the 32 tokens).
      const size_t group_bytes = static_cast<size_t>(d) * (kCg / 4) + static_cast<size_t>(d) * 4;
      for (int g = 0; g < tokens / kCg; ++g) {
        uint8_t* codes_out = out + g * group_bytes;
        uint8_t* params_out = codes_out + static_cast<size_t>(d) * (kCg / 4);
        const float* base = rows + static_cast<ptrdiff_t>(g) * kCg * row_stride;
        for (int c = 0; c < d; ++c) {
          const Int2Params p = ComputeInt2Params(base + c, kCg, row_stride);
          StoreParams(p, params_out + 4 * c);
          uint8_t codes[kCg];
          for (int i = 0; i < kCg; ++i) codes[i] = QuantizeInt2(base[i * row_stride + c], p);
          PackQuartered(codes, kCg, codes_out + c * (kCg / 4));
        }
      }
      break;
    }
  }
  return KvQuantStatus::kOk;
}

KvQuantStatus DecodeSegment(SegmentKind kind, const uint8_t* segment, int tokens, int head_dim,
                            float* rows, ptrdiff_t row_stride) {
  if (rows == nullptr || segment == nullptr) return KvQuantStatus::kNullPointer;
  if (!KindOk(kind)) return KvQuantStatus::kBadSegmentKind;
  if (!ShapeOk(kind, tokens, head_dim) || row_stride < head_dim) return KvQuantStatus::kBadShape;
  const int d = head_dim;
  switch (kind) {
    case SegmentKind::kBf16Rows:
      for (int t = 0; t < tokens; ++t) {
        for (int i = 0; i < d; ++i) {
          const size_t at = 2 * (static_cast<size_t>(t) * d + i);
          rows[t * row_stride + i] = kvformat::Bf16BitsToFloat(
              static_cast<uint16_t>(segment[at] | (segment[at + 1] << 8)));
        }
      }
      break;
    case SegmentKind::kInt2PerToken:
    case SegmentKind::kInt2TokenGroup: {
      const int group = kind == SegmentKind::kInt2PerToken ? d : kTg;
      const uint8_t* params = segment + static_cast<size_t>(tokens) * (d / 4);
      const int params_per_row = 4 * (d / group);
      for (int t = 0; t < tokens; ++t) {
        DecodeRowGroups(segment + static_cast<size_t>(t) * (d / 4),
                        params + static_cast<size_t>(t) * params_per_row, d, group,
                        rows + t * row_stride);
      }
      break;
    }
    case SegmentKind::kInt2ChannelGroup: {
      const size_t group_bytes = static_cast<size_t>(d) * (kCg / 4) + static_cast<size_t>(d) * 4;
      for (int g = 0; g < tokens / kCg; ++g) {
        const uint8_t* codes_in = segment + g * group_bytes;
        const uint8_t* params_in = codes_in + static_cast<size_t>(d) * (kCg / 4);
        float* base = rows + static_cast<ptrdiff_t>(g) * kCg * row_stride;
        for (int c = 0; c < d; ++c) {
          const Int2Params p = LoadParams(params_in + 4 * c);
          uint8_t codes[kCg];
          UnpackQuartered(codes_in + c * (kCg / 4), kCg, codes);
          for (int i = 0; i < kCg; ++i) base[i * row_stride + c] = DequantizeInt2(codes[i], p);
        }
      }
      break;
    }
  }
  return KvQuantStatus::kOk;
}

void ComputeTokenNorms(const float* keys, int tokens, int heads, int head_dim,
                       ptrdiff_t token_stride, float* norms) {
  for (int t = 0; t < tokens; ++t) {
    double sum = 0.0;
    const float* row = keys + t * token_stride;
    for (int i = 0; i < heads * head_dim; ++i) sum += static_cast<double>(row[i]) * row[i];
    norms[t] = static_cast<float>(std::sqrt(sum));
  }
}

KvQuantStatus KvQuantRef(const KvQuantParams& p) {
  if ((p.input_bf16 == nullptr) == (p.input_f32 == nullptr) || p.output == nullptr) {
    return KvQuantStatus::kNullPointer;
  }
  if (!KindOk(p.kind)) return KvQuantStatus::kBadSegmentKind;
  if (p.heads <= 0 || !ShapeOk(p.kind, p.tokens, p.head_dim)) return KvQuantStatus::kBadShape;
  if (!(p.clip_ratio > 0.0f)) return KvQuantStatus::kBadClipRatio;
  const int t_count = p.tokens;
  const int h_count = p.heads;
  const int d = p.head_dim;
  const ptrdiff_t row_elems = static_cast<ptrdiff_t>(h_count) * d;
  const ptrdiff_t in_stride = p.input_token_stride == 0 ? row_elems : p.input_token_stride;
  if (in_stride < row_elems) return KvQuantStatus::kBadShape;
  const ptrdiff_t seg_bytes = static_cast<ptrdiff_t>(kvformat::SegmentBytes(p.kind, t_count, d));
  const ptrdiff_t out_stride = p.output_head_stride == 0 ? seg_bytes : p.output_head_stride;
  if (out_stride < seg_bytes) return KvQuantStatus::kBadShape;

  // Stage 1: load, rotate, [normalise], clip into a [T][H][D] f32 work buffer.
  std::vector<float> work(static_cast<size_t>(t_count) * row_elems);
  std::vector<float> in_row(d);
  std::vector<float> scratch(d);
  std::vector<double> acc(d);
  for (int t = 0; t < t_count; ++t) {
    for (int h = 0; h < h_count; ++h) {
      const ptrdiff_t src = t * in_stride + static_cast<ptrdiff_t>(h) * d;
      for (int i = 0; i < d; ++i) {
        in_row[i] = p.input_bf16 != nullptr ? kvformat::Bf16BitsToFloat(p.input_bf16[src + i])
                                            : p.input_f32[src + i];
      }
      float* dst = work.data() + t * row_elems + static_cast<ptrdiff_t>(h) * d;
      if (p.rotation != nullptr) {
        // Row-vector convention: y_j = sum_i x_i R[i][j], accumulated in double in increasing i
        // (lib/quant's Codec rotates with the same order, so both give identical rows). The
        // i-outer loop streams R row by row and vectorises over j.
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int i = 0; i < d; ++i) {
          const double xi = in_row[i];
          const float* r_row = p.rotation + static_cast<ptrdiff_t>(i) * d;
          for (int j = 0; j < d; ++j) acc[j] += xi * r_row[j];
        }
        for (int j = 0; j < d; ++j) dst[j] = static_cast<float>(acc[j]);
      } else {
        std::copy(in_row.begin(), in_row.end(), dst);
      }
    }
    if (p.token_norms_out != nullptr) {
      float* row = work.data() + t * row_elems;
      ComputeTokenNorms(row, 1, h_count, d, row_elems, p.token_norms_out + t);
      const float n = p.token_norms_out[t];
      const float inv = n > 0.0f ? 1.0f / n : 0.0f;
      for (ptrdiff_t i = 0; i < row_elems; ++i) row[i] *= inv;
    }
    for (int h = 0; h < h_count; ++h) {
      ClipRow(work.data() + t * row_elems + static_cast<ptrdiff_t>(h) * d, d, p.clip_ratio,
              scratch.data());
    }
  }
  // Stage 2: one segment per head.
  for (int h = 0; h < h_count; ++h) {
    const KvQuantStatus s =
        EncodeSegment(p.kind, work.data() + static_cast<ptrdiff_t>(h) * d, t_count, d, row_elems,
                      p.output + h * out_stride);
    if (s != KvQuantStatus::kOk) return s;
  }
  return KvQuantStatus::kOk;
}

}  // namespace oscarkv::kernels
