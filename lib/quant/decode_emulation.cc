#include "lib/quant/decode_emulation.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/base/log.h"
#include "lib/kvformat/float16.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::quant {

using kvformat::CodecId;
using kvformat::Int2Params;
using kvformat::SegmentKind;

namespace {

constexpr int kQueryBlock = 64;  // query positions per GEMM block

void CheckOk(kernels::KvQuantStatus s) {
  CHECK(s == kernels::KvQuantStatus::kOk) << kernels::KvQuantStatusString(s);
}

}  // namespace

absl::StatusOr<EmulatedLayerKv> BuildEmulatedLayerKv(const CodecSpec& spec, const float* rot_k,
                                                     const float* rot_v, int tokens, int kv_heads,
                                                     int head_dim, const float* k, const float* v,
                                                     float k_clip_ratio, float v_clip_ratio,
                                                     int per_token_group) {
  const float k_clip = k_clip_ratio > 0.0f ? k_clip_ratio : spec.k_clip_ratio;
  const float v_clip = v_clip_ratio > 0.0f ? v_clip_ratio : spec.v_clip_ratio;
  if (tokens < 0 || kv_heads <= 0 || head_dim <= 0 || head_dim % 32 != 0 || head_dim > 256 ||
      (tokens > 0 && (k == nullptr || v == nullptr))) {
    return absl::InvalidArgumentError("BuildEmulatedLayerKv: bad shape or null input");
  }
  const int group = per_token_group > 0 ? per_token_group : head_dim;
  if (group % 32 != 0 || head_dim % group != 0) {  // the INT2 row encoder takes multiples of 32
    return absl::InvalidArgumentError(
        absl::StrCat("BuildEmulatedLayerKv: per-token group ", per_token_group,
                     " must be a multiple of 32 that divides head_dim ", head_dim));
  }
  const int d = head_dim;
  const int64_t row = static_cast<int64_t>(kv_heads) * d;  // floats per token
  EmulatedLayerKv kv;
  kv.tokens = tokens;
  kv.kv_heads = kv_heads;
  kv.head_dim = d;
  kv.k_fp.resize(static_cast<size_t>(tokens) * row);
  kv.v_fp.resize(kv.k_fp.size());
  for (int64_t r = 0; r < static_cast<int64_t>(tokens) * kv_heads; ++r) {
    RotateRowToBf16(k + r * d, rot_k, d, kv.k_fp.data() + r * d);
    RotateRowToBf16(v + r * d, rot_v, d, kv.v_fp.data() + r * d);
  }
  if (spec.token_norms) {
    kv.token_scale.resize(tokens);
    for (int t = 0; t < tokens; ++t) {
      float* kt = kv.k_fp.data() + t * row;
      const float norm = OmniTokenNorm(kt, kv_heads, d);
      kv.token_scale[t] = norm;
      for (int64_t i = 0; i < row; ++i) kt[i] = kvformat::RoundToBf16(kt[i] / norm);
    }
  }
  kv.k_deq = kv.k_fp;
  kv.v_deq = kv.v_fp;
  if (spec.id == CodecId::kBf16) return kv;
  if (spec.residual_tokens == 0) {
    // Per-token codecs: each row (or each group of a row) on its own.
    uint8_t codes[256 / 4];
    Int2Params p;
    for (int64_t at = 0; at < static_cast<int64_t>(tokens) * kv_heads * d; at += group) {
      EncodePerTokenRow(kv.k_fp.data() + at, group, k_clip, codes, &p);
      DecodePerTokenRow(codes, p, group, kv.k_deq.data() + at);
      EncodePerTokenRow(kv.v_fp.data() + at, group, v_clip, codes, &p);
      DecodePerTokenRow(codes, p, group, kv.v_deq.data() + at);
    }
    return kv;
  }
  // KIVI / OScaR: K per channel over complete 32-token groups aligned at 0; V per token.
  const int cg = kvformat::kChannelGroupTokens;
  std::vector<uint8_t> seg(kvformat::SegmentBytes(SegmentKind::kInt2ChannelGroup, cg, d));
  for (int g = 0; (g + 1) * cg <= tokens; ++g) {
    for (int h = 0; h < kv_heads; ++h) {
      const int64_t at = static_cast<int64_t>(g) * cg * row + h * d;
      CheckOk(kernels::EncodeSegment(SegmentKind::kInt2ChannelGroup, kv.k_fp.data() + at, cg, d,
                                     row, seg.data()));
      CheckOk(kernels::DecodeSegment(SegmentKind::kInt2ChannelGroup, seg.data(), cg, d,
                                     kv.k_deq.data() + at, row));
    }
  }
  std::vector<uint8_t> vseg(kvformat::SegmentBytes(SegmentKind::kInt2TokenGroup, 1, d));
  for (int64_t r = 0; r < static_cast<int64_t>(tokens) * kv_heads; ++r) {
    CheckOk(kernels::EncodeSegment(SegmentKind::kInt2TokenGroup, kv.v_fp.data() + r * d, 1, d, d,
                                   vseg.data()));
    CheckOk(kernels::DecodeSegment(SegmentKind::kInt2TokenGroup, vseg.data(), 1, d,
                                   kv.v_deq.data() + r * d, d));
  }
  return kv;
}

void SeenRowsAt(const CodecSpec& spec, const EmulatedLayerKv& kv, int t, int head,
                std::vector<float>* k, std::vector<float>* v, std::vector<float>* token_scale) {
  const int n = t + 1;
  const int d = kv.head_dim;
  const TierWindows w = WindowsAt(spec, n);
  k->resize(static_cast<size_t>(n) * d);
  v->resize(k->size());
  for (int j = 0; j < n; ++j) {
    const size_t src = (static_cast<size_t>(j) * kv.kv_heads + head) * d;
    const bool kq = j >= w.quant_begin && j < w.k_quant_end;
    const bool vq = j >= w.quant_begin && j < w.v_quant_end;
    std::memcpy(k->data() + static_cast<size_t>(j) * d, (kq ? kv.k_deq : kv.k_fp).data() + src,
                sizeof(float) * d);
    std::memcpy(v->data() + static_cast<size_t>(j) * d, (vq ? kv.v_deq : kv.v_fp).data() + src,
                sizeof(float) * d);
  }
  token_scale->assign(kv.token_scale.begin(),
                      kv.token_scale.empty() ? kv.token_scale.begin() : kv.token_scale.begin() + n);
}

absl::Status EmulateDecodeAttention(const CodecSpec& spec, const EmulatedLayerKv& kv,
                                    const float* rot_k, const float* rot_v, const float* q,
                                    int num_q_heads, float* out, float sm_scale_arg) {
  const int T = kv.tokens;
  const int hkv = kv.kv_heads;
  const int d = kv.head_dim;
  if (num_q_heads <= 0 || num_q_heads % hkv != 0 || (T > 0 && (q == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError("EmulateDecodeAttention: bad head count or null pointer");
  }
  const int g = num_q_heads / hkv;
  const float sm_scale =
      sm_scale_arg > 0.0f ? sm_scale_arg : 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t kv_row = static_cast<int64_t>(hkv) * d;
  const int64_t q_row = static_cast<int64_t>(num_q_heads) * d;
  const int max_rows = kQueryBlock * g;
  std::vector<float> qb(static_cast<size_t>(max_rows) * d);
  std::vector<float> s_fp(static_cast<size_t>(max_rows) * T), s_dq(s_fp.size());
  std::vector<float> ob(static_cast<size_t>(max_rows) * d);
  // R_V^T, so that o~ R_V^T is a row times a matrix (the sums in the textbook loop's order).
  const std::vector<float> rot_v_t =
      rot_v == nullptr ? std::vector<float>() : TransposedSquare(rot_v, d);
  for (int h = 0; h < hkv; ++h) {
    const float* kf = kv.k_fp.data() + h * d;
    const float* kd = kv.k_deq.data() + h * d;
    const float* vf = kv.v_fp.data() + h * d;
    const float* vd = kv.v_deq.data() + h * d;
    for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
      const int t1 = std::min(T, t0 + kQueryBlock);
      const int rows = (t1 - t0) * g;
      const int cols = t1;  // keys 0..t1-1 (causal)
      // Rotated queries of the block, row r = (t - t0) * g + i.
      for (int t = t0; t < t1; ++t) {
        for (int i = 0; i < g; ++i) {
          const float* qs = q + t * q_row + static_cast<int64_t>(h * g + i) * d;
          float* qd = qb.data() + static_cast<size_t>((t - t0) * g + i) * d;
          if (rot_k == nullptr) {
            std::copy_n(qs, d, qd);
          } else {
            RowTimesMatrix(qs, rot_k, d, qd);
          }
        }
      }
      // Scores only where some row of the block reads them: dequantised keys in
      // [quant_begin, k end of the last row), full-precision keys outside [quant_begin, k end of
      // the first row) (tier ends only grow with t). Halves the work against both full widths.
      const TierWindows first = WindowsAt(spec, t0 + 1), last = WindowsAt(spec, t1);
      const int qbeg = std::min(first.quant_begin, cols);
      const auto score = [&](const float* keys, std::vector<float>& s, int j0, int j1) {
        if (j1 <= j0) return;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, j1 - j0, d, 1.0f, qb.data(), d,
                    keys + j0 * kv_row, static_cast<int>(kv_row), 0.0f, s.data() + j0, cols);
      };
      // Full-precision columns [0, quant_begin) and [fp_from, cols), as one range when they touch,
      // so that a block with nothing quantised yet sums exactly as the BF16 codec does.
      const auto for_fp_ranges = [&](int fp_from, const auto& run) {
        if (fp_from == qbeg) {
          run(0, cols);
        } else {
          run(0, qbeg);
          run(fp_from, cols);
        }
      };
      const int k_fp_from = std::max(qbeg, std::min(first.k_quant_end, cols));
      const int v_fp_from = std::max(qbeg, std::min(first.v_quant_end, cols));
      for_fp_ranges(k_fp_from, [&](int j0, int j1) { score(kf, s_fp, j0, j1); });
      score(kd, s_dq, qbeg, std::min(last.k_quant_end, cols));
      // Select, mask, softmax; then split the probabilities by the V choice:
      // s_fp <- P where V is read as BF16, s_dq <- P where V is read dequantised.
      for (int r = 0; r < rows; ++r) {
        const int t = t0 + r / g;
        const TierWindows w = WindowsAt(spec, t + 1);
        float* pf = s_fp.data() + static_cast<size_t>(r) * cols;
        float* pd = s_dq.data() + static_cast<size_t>(r) * cols;
        float m = -std::numeric_limits<float>::infinity();
        for (int j = 0; j <= t; ++j) {
          const bool kq = j >= w.quant_begin && j < w.k_quant_end;
          float s = (kq ? pd[j] : pf[j]) * sm_scale;
          if (!kv.token_scale.empty()) s *= kv.token_scale[j];
          pf[j] = s;
          m = std::max(m, s);
        }
        float l = 0.0f;
        for (int j = 0; j <= t; ++j) {
          pf[j] = std::exp(pf[j] - m);
          l += pf[j];
        }
        const float inv = 1.0f / l;
        for (int j = 0; j < cols; ++j) {
          const float p = j <= t ? pf[j] * inv : 0.0f;
          const bool vq = j >= w.quant_begin && j < w.v_quant_end;
          pf[j] = vq ? 0.0f : p;
          pd[j] = vq ? p : 0.0f;
        }
      }
      // P V over the same kind of ranges (the split probabilities are zero outside them).
      std::fill(ob.begin(), ob.end(), 0.0f);
      const auto pv = [&](const std::vector<float>& p, const float* values, int j0, int j1) {
        if (j1 <= j0) return;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, j1 - j0, 1.0f,
                    p.data() + j0, cols, values + j0 * kv_row, static_cast<int>(kv_row), 1.0f,
                    ob.data(), d);
      };
      for_fp_ranges(v_fp_from, [&](int j0, int j1) { pv(s_fp, vf, j0, j1); });
      pv(s_dq, vd, qbeg, std::min(last.v_quant_end, cols));
      // o = o~ R_V^T into out[t][h*g + i].
      for (int r = 0; r < rows; ++r) {
        const int t = t0 + r / g;
        const float* o = ob.data() + static_cast<size_t>(r) * d;
        float* dst = out + t * q_row + static_cast<int64_t>(h * g + r % g) * d;
        if (rot_v == nullptr) {
          std::copy_n(o, d, dst);
        } else {
          RowTimesMatrix(o, rot_v_t.data(), d, dst);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::quant
