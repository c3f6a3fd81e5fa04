// CPU references of the GPU forward's kernels (model_kernels_ref.h). Plain loops, written to
// follow lib/model/forward_cpu.cc operation for operation where that file has the same step.
#include "kernels/model/model_kernels_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "lib/kvformat/float16.h"

namespace oscarkv::kernels {
namespace {

using kvformat::Bf16BitsToFloat;
using kvformat::FloatToBf16Bits;
using kvformat::RoundToBf16;

// 1 / sqrt(mean(x^2) + eps) exactly as lib/model RmsNormTo: sum of squares in double.
float RmsInv(const float* x, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / n + eps));
}

// lib/model ApplyRope on `num_heads` heads of one token, with precomputed cos/sin.
void RotateHeads(float* x, int num_heads, int head_dim, int half, const float* cs,
                 const float* sn, RopePairing pairing) {
  for (int h = 0; h < num_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int i0 = pairing == RopePairing::kAdjacentPairs ? 2 * i : i;
      const int i1 = pairing == RopePairing::kAdjacentPairs ? 2 * i + 1 : i + half;
      const float a = xh[i0], b = xh[i1];
      xh[i0] = a * cs[i] - b * sn[i];
      xh[i1] = a * sn[i] + b * cs[i];
    }
  }
}

}  // namespace

void EmbedRowsRef(const uint16_t* table_bf16, const int32_t* tokens, int64_t rows, int d_model,
                  float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* src = table_bf16 + static_cast<int64_t>(tokens[r]) * d_model;
    for (int i = 0; i < d_model; ++i) x[r * d_model + i] = Bf16BitsToFloat(src[i]);
  }
}

void RmsNormToBf16Ref(const float* x, const float* weight, int64_t rows, int n, float eps,
                      uint16_t* out_bf16) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float inv = RmsInv(xr, n, eps);
    for (int i = 0; i < n; ++i) out_bf16[r * n + i] = FloatToBf16Bits(xr[i] * inv * weight[i]);
  }
}

void QkvPostRef(const QkvPostParams& p) {
  const int d = p.head_dim, half = p.rope_dim / 2;
  std::vector<float> cs(half > 0 ? half : 1), sn(half > 0 ? half : 1);
  for (int64_t r = 0; r < p.rows; ++r) {
    float* q = p.q + r * p.q_row_stride;
    float* k = p.k + r * p.k_row_stride;
    float* v = p.v + r * p.v_row_stride;
    const int qn = p.num_q_heads * d, kn = p.num_kv_heads * d;
    if (p.bq != nullptr) for (int i = 0; i < qn; ++i) q[i] += p.bq[i];
    if (p.bk != nullptr) for (int i = 0; i < kn; ++i) k[i] += p.bk[i];
    if (p.bv != nullptr) for (int i = 0; i < kn; ++i) v[i] += p.bv[i];
    auto norm_heads = [&](float* x, int heads, const float* w) {
      for (int h = 0; h < heads; ++h) {
        float* xh = x + static_cast<int64_t>(h) * d;
        const float inv = RmsInv(xh, d, p.eps);
        for (int i = 0; i < d; ++i) xh[i] = xh[i] * inv * w[i];
      }
    };
    if (p.q_norm != nullptr) norm_heads(q, p.num_q_heads, p.q_norm);
    if (p.k_norm != nullptr) norm_heads(k, p.num_kv_heads, p.k_norm);
    // Angles as lib/model ApplyRope: in double, then cos/sin rounded to float.
    const double pos = static_cast<double>(p.positions[r]) / p.rope_scale;
    for (int i = 0; i < half; ++i) {
      double freq = std::pow(p.rope_theta, -2.0 * i / p.rope_dim);
      if (p.freq_div != nullptr) freq /= p.freq_div[i];
      const double a = pos * freq;
      cs[i] = static_cast<float>(std::cos(a));
      sn[i] = static_cast<float>(std::sin(a));
    }
    RotateHeads(q, p.num_q_heads, d, half, cs.data(), sn.data(), p.pairing);
    RotateHeads(k, p.num_kv_heads, d, half, cs.data(), sn.data(), p.pairing);
  }
}

void SiluMulToBf16Ref(const float* gate_up, int64_t rows, int d_ff, uint16_t* out_bf16) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * d_ff;
    const float* up = gate + d_ff;
    for (int i = 0; i < d_ff; ++i) {
      const float g = gate[i];
      out_bf16[r * d_ff + i] = FloatToBf16Bits(g / (1.0f + std::exp(-g)) * up[i]);
    }
  }
}

void F32ToBf16Ref(const float* in, int64_t n, uint16_t* out_bf16) {
  for (int64_t i = 0; i < n; ++i) out_bf16[i] = FloatToBf16Bits(in[i]);
}

void ArgmaxRowsRef(const float* logits, int rows, int vocab, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    const float* x = logits + static_cast<int64_t>(r) * vocab;
    // NaN never wins; an all -inf row gives its first index, an all-NaN row gives 0.
    float best = -INFINITY;
    int32_t idx = -1;
    for (int i = 0; i < vocab; ++i) {
      if (x[i] > best || (idx < 0 && x[i] == best)) {
        best = x[i];
        idx = i;
      }
    }
    out[r] = idx < 0 ? 0 : idx;
  }
}

void PrefillAttentionRef(const PrefillAttentionParams& p) {
  const int64_t t_len = p.num_tokens;
  const int64_t kv_len = p.q_offset + t_len;  // keys: the earlier tokens, then the query rows
  const int d = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  // K and V rounded to bf16 once, as the BF16 cache stores them: [Hkv][kv_len][D].
  std::vector<float> kb(static_cast<size_t>(p.num_kv_heads) * kv_len * d);
  std::vector<float> vb(kb.size());
  for (int h = 0; h < p.num_kv_heads; ++h) {
    for (int64_t t = 0; t < kv_len; ++t) {
      for (int i = 0; i < d; ++i) {
        const size_t dst = (static_cast<size_t>(h) * kv_len + t) * d + i;
        kb[dst] = RoundToBf16(p.k[t * p.k_row_stride + h * d + i]);
        vb[dst] = RoundToBf16(p.v[t * p.v_row_stride + h * d + i]);
      }
    }
  }
  std::vector<float> s(kv_len), acc(d);
  for (int qh = 0; qh < p.num_q_heads; ++qh) {
    const int g = qh / group;
    const float* kg = kb.data() + static_cast<size_t>(g) * kv_len * d;
    const float* vg = vb.data() + static_cast<size_t>(g) * kv_len * d;
    for (int64_t t = 0; t < t_len; ++t) {
      const float* q = p.q + t * p.q_row_stride + qh * d;
      const int64_t last = p.q_offset + t;  // last visible key: this query's own position
      float mx = -INFINITY;
      for (int64_t j = 0; j <= last; ++j) {
        float dot = 0.0f;
        for (int i = 0; i < d; ++i) dot += q[i] * kg[j * d + i];
        s[j] = dot * p.sm_scale;
        mx = s[j] > mx ? s[j] : mx;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j <= last; ++j) {
        s[j] = std::exp(s[j] - mx);
        sum += s[j];
      }
      const float inv = 1.0f / sum;
      for (int i = 0; i < d; ++i) acc[i] = 0.0f;
      for (int64_t j = 0; j <= last; ++j) {
        const float w = s[j] * inv;
        for (int i = 0; i < d; ++i) acc[i] += w * vg[j * d + i];
      }
      uint16_t* o = p.out_bf16 + (t * p.num_q_heads + qh) * d;
      for (int i = 0; i < d; ++i) o[i] = FloatToBf16Bits(acc[i]);
    }
  }
}

void WriteBf16PageRowsRef(const PageRowsParams& p) {
  const int d = p.head_dim;
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int h = 0; h < p.heads; ++h) {
      uint8_t* dst = p.pool + static_cast<int64_t>(p.page_ids[t]) * p.page_stride_bytes +
                     h * p.head_stride_bytes + p.segment_offset_bytes +
                     static_cast<int64_t>(p.rows_in_page[t]) * d * 2;
      const float* src = p.rows + t * p.row_stride + static_cast<int64_t>(h) * d;
      for (int i = 0; i < d; ++i) {
        const uint16_t b = FloatToBf16Bits(src[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
    }
  }
}

void GatherBf16PageRowsRef(const PageGatherParams& p) {
  const int d = p.head_dim;
  for (int64_t pg = 0; pg < p.num_pages; ++pg) {
    for (int j = 0; j < 8; ++j) {
      for (int h = 0; h < p.heads; ++h) {
        const uint8_t* src = p.pool + static_cast<int64_t>(p.page_ids[pg]) * p.page_stride_bytes +
                             h * p.head_stride_bytes + p.segment_offset_bytes +
                             static_cast<int64_t>(j) * d * 2;
        uint16_t* dst = p.out_bf16 + ((pg * 8 + j) * p.heads + h) * d;
        std::memcpy(dst, src, static_cast<size_t>(d) * 2);
      }
    }
  }
}

void RotateRowsRef(const RotateRowsParams& p) {
  const int d = p.head_dim;
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int h = 0; h < p.heads; ++h) {
      const float* x = p.in + t * p.in_token_stride + static_cast<int64_t>(h) * d;
      const int64_t y = (t * p.heads + h) * d;
      for (int j = 0; j < d; ++j) {
        float acc = 0.0f;
        for (int i = 0; i < d; ++i) {
          const float prod = x[i] * p.rotation[i * d + j];
          acc = acc + prod;
        }
        if (p.out_bf16 != nullptr) {
          p.out_bf16[y + j] = FloatToBf16Bits(acc);
        } else {
          p.out[y + j] = acc;
        }
      }
    }
  }
}

namespace {
// The byte offsets of page i of layer l in the pool and in the packed buffer.
int64_t PoolChunk(const PagePackParams& p, int l, int64_t i) {
  return (int64_t{l} * p.pool_pages + p.pages[i]) * p.chunk_bytes;
}
int64_t PackedChunk(const PagePackParams& p, int l, int64_t i) {
  return (int64_t{l} * p.num_pages + i) * p.chunk_bytes;
}
}  // namespace

void PackPagesRef(const PagePackParams& p) {
  for (int l = 0; l < p.layers; ++l) {
    for (int64_t i = 0; i < p.num_pages; ++i) {
      std::memcpy(p.packed + PackedChunk(p, l, i), p.pool + PoolChunk(p, l, i), p.chunk_bytes);
    }
  }
}

void UnpackPagesRef(const PagePackParams& p) {
  for (int l = 0; l < p.layers; ++l) {
    for (int64_t i = 0; i < p.num_pages; ++i) {
      std::memcpy(p.pool + PoolChunk(p, l, i), p.packed + PackedChunk(p, l, i), p.chunk_bytes);
    }
  }
}

}  // namespace oscarkv::kernels
