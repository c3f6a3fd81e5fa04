#include "lib/quant/codec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/base/status_macros.h"
#include "lib/quant/hadamard.h"

namespace oscarkv::quant {
namespace {

absl::Status FromKernel(kernels::KvQuantStatus s, std::string_view what) {
  if (s == kernels::KvQuantStatus::kOk) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(what), ": ", kernels::KvQuantStatusString(s)));
}

const char* SideName(KvSide side) { return side == KvSide::kKey ? "K" : "V"; }

}  // namespace

absl::StatusOr<std::unique_ptr<Codec>> Codec::Create(std::string_view name, int head_dim,
                                                     const Calibration* calibration, int layer) {
  OSCARKV_ASSIGN_OR_RETURN(const CodecSpec* spec, FindCodec(name));
  return Create(*spec, head_dim, calibration, layer);
}

absl::StatusOr<std::unique_ptr<Codec>> Codec::Create(const CodecSpec& spec, int head_dim,
                                                     const Calibration* calibration, int layer) {
  if (head_dim <= 0 || head_dim % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec ", std::string(spec.name), ": head_dim ", head_dim,
                     " is not a positive multiple of 32"));
  }
  std::unique_ptr<Codec> c(new Codec(spec, head_dim));
  c->k_clip_ = spec.k_clip_ratio;
  c->v_clip_ = spec.v_clip_ratio;
  switch (spec.rotation) {
    case RotationKind::kNone:
      break;
    case RotationKind::kHadamard: {
      if (!IsPowerOfTwo(head_dim)) {
        return absl::InvalidArgumentError(absl::StrCat("codec ", std::string(spec.name),
                                                       " needs a power-of-two head_dim, got ",
                                                       head_dim));
      }
      const std::vector<double> h = HadamardMatrix(head_dim);
      c->k_rot_.assign(h.begin(), h.end());
      c->v_rot_ = c->k_rot_;
      break;
    }
    case RotationKind::kCalibratedAttention:
    case RotationKind::kCalibratedGram: {
      if (calibration == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "codec ", std::string(spec.name), " needs a calibration file (objectives ",
            std::string(spec.k_objective), "/", std::string(spec.v_objective), ")"));
      }
      if (calibration->head_dim != head_dim) {
        return absl::InvalidArgumentError(absl::StrCat("calibration head_dim ",
                                                       calibration->head_dim, " != ", head_dim));
      }
      if (calibration->k_objective != spec.k_objective ||
          calibration->v_objective != spec.v_objective) {
        return absl::InvalidArgumentError(absl::StrCat(
            "codec ", std::string(spec.name), " needs objectives ", std::string(spec.k_objective),
            "/", std::string(spec.v_objective), ", calibration has ", calibration->k_objective,
            "/", calibration->v_objective));
      }
      if (layer < 0 || static_cast<size_t>(layer) >= calibration->layers.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", layer, " out of range: calibration has ", calibration->layers.size()));
      }
      const CalibrationLayer& l = calibration->layers[layer];
      if (l.k_rotation.size() != static_cast<size_t>(head_dim) * head_dim ||
          l.v_rotation.size() != static_cast<size_t>(head_dim) * head_dim) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " rotation shape"));
      }
      c->k_rot_ = l.k_rotation;
      c->v_rot_ = l.v_rotation;
      if (spec.k_clip_ratio < 1.0f) c->k_clip_ = calibration->k_clip_ratio;
      if (spec.v_clip_ratio < 1.0f) c->v_clip_ = calibration->v_clip_ratio;
      break;
    }
  }
  return c;
}

size_t Codec::SegmentBytes(KvSide side, int tokens) const {
  return kvformat::SegmentBytes(segment_kind(side), tokens, head_dim_);
}

absl::Status Codec::Apply(const std::vector<float>& r, bool transpose,
                          std::span<float> rows) const {
  const int d = head_dim_;
  if (rows.size() % d != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotation input of ", rows.size(), " floats is not a multiple of ", d));
  }
  if (r.empty()) return absl::OkStatus();
  // rt holds the matrix applied as y_j = sum_i x_i M[i][j]: R itself, or R^T for un-rotation.
  const float* m = r.data();
  std::vector<float> rt;
  if (transpose) {
    rt.resize(r.size());
    for (int i = 0; i < d; ++i) {
      for (int j = 0; j < d; ++j) rt[static_cast<size_t>(i) * d + j] = r[static_cast<size_t>(j) * d + i];
    }
    m = rt.data();
  }
  std::vector<double> acc(d);
  for (size_t row = 0; row < rows.size() / d; ++row) {
    float* x = rows.data() + row * d;
    // Same double accumulation order (increasing i) as kernels::KvQuantRef: identical rows.
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int i = 0; i < d; ++i) {
      const double xi = x[i];
      const float* m_row = m + static_cast<size_t>(i) * d;
      for (int j = 0; j < d; ++j) acc[j] += xi * m_row[j];
    }
    for (int j = 0; j < d; ++j) x[j] = static_cast<float>(acc[j]);
  }
  return absl::OkStatus();
}

absl::Status Codec::RotateQuery(std::span<float> rows) const { return Apply(k_rot_, false, rows); }
absl::Status Codec::RotateKey(std::span<float> rows) const { return Apply(k_rot_, false, rows); }
absl::Status Codec::RotateValue(std::span<float> rows) const { return Apply(v_rot_, false, rows); }
absl::Status Codec::UnrotateOutput(std::span<float> rows) const {
  return Apply(v_rot_, true, rows);
}
absl::Status Codec::UnrotateKey(std::span<float> rows) const { return Apply(k_rot_, true, rows); }

absl::Status Codec::ComputeTokenNorms(std::span<const float> rotated_keys, int tokens,
                                      int kv_heads, std::span<float> norms) const {
  const size_t row = static_cast<size_t>(kv_heads) * head_dim_;
  if (tokens < 0 || kv_heads <= 0 || rotated_keys.size() != static_cast<size_t>(tokens) * row ||
      norms.size() != static_cast<size_t>(tokens)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token norms: ", rotated_keys.size(), " floats for ", tokens, " tokens x ", kv_heads,
        " heads x ", head_dim_, ", ", norms.size(), " norms"));
  }
  kernels::ComputeTokenNorms(rotated_keys.data(), tokens, kv_heads, head_dim_,
                             static_cast<ptrdiff_t>(row), norms.data());
  return absl::OkStatus();
}

absl::Status Codec::CheckNorms(KvSide side, int tokens, std::span<const float> norms) const {
  const bool need = side == KvSide::kKey && spec_.token_norms;
  if (need && norms.size() != static_cast<size_t>(tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("codec ", std::string(spec_.name),
                                                   " K segment needs ", tokens,
                                                   " token norms, got ", norms.size()));
  }
  if (!need && !norms.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("codec ", std::string(spec_.name), " ",
                                                   SideName(side), " takes no token norms"));
  }
  return absl::OkStatus();
}

absl::Status Codec::EncodeSegment(KvSide side, std::span<const float> rows, int tokens,
                                  std::span<const float> token_norms,
                                  std::span<uint8_t> out) const {
  const int d = head_dim_;
  if (tokens <= 0 || rows.size() != static_cast<size_t>(tokens) * d) {
    return absl::InvalidArgumentError(absl::StrCat("encode ", SideName(side), ": ", rows.size(),
                                                   " floats for ", tokens, " tokens x ", d));
  }
  OSCARKV_RETURN_IF_ERROR(CheckNorms(side, tokens, token_norms));
  const size_t need = SegmentBytes(side, tokens);
  if (out.size() != need) {
    return absl::InvalidArgumentError(absl::StrCat("encode ", SideName(side), ": output of ",
                                                   out.size(), " bytes, segment needs ", need));
  }
  std::vector<float> work(rows.begin(), rows.end());
  std::vector<float> scratch(d);
  const float clip = clip_ratio(side);
  for (int t = 0; t < tokens; ++t) {
    float* x = work.data() + static_cast<size_t>(t) * d;
    if (!token_norms.empty()) {
      // Multiply by the reciprocal exactly as kernels::KvQuantRef does.
      const float n = token_norms[t];
      const float inv = n > 0.0f ? 1.0f / n : 0.0f;
      for (int i = 0; i < d; ++i) x[i] *= inv;
    }
    kernels::ClipRow(x, d, clip, scratch.data());
  }
  return FromKernel(
      kernels::EncodeSegment(segment_kind(side), work.data(), tokens, d, d, out.data()),
      absl::StrCat("encode ", SideName(side)));
}

absl::Status Codec::DecodeSegment(KvSide side, std::span<const uint8_t> segment, int tokens,
                                  std::span<const float> token_norms,
                                  std::span<float> rows) const {
  const int d = head_dim_;
  if (tokens <= 0 || rows.size() != static_cast<size_t>(tokens) * d) {
    return absl::InvalidArgumentError(absl::StrCat("decode ", SideName(side), ": ", rows.size(),
                                                   " floats for ", tokens, " tokens x ", d));
  }
  OSCARKV_RETURN_IF_ERROR(CheckNorms(side, tokens, token_norms));
  const size_t need = SegmentBytes(side, tokens);
  if (segment.size() != need) {
    return absl::InvalidArgumentError(absl::StrCat("decode ", SideName(side), ": segment of ",
                                                   segment.size(), " bytes, want ", need));
  }
  OSCARKV_RETURN_IF_ERROR(FromKernel(
      kernels::DecodeSegment(segment_kind(side), segment.data(), tokens, d, rows.data(), d),
      absl::StrCat("decode ", SideName(side))));
  if (!token_norms.empty()) {
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < d; ++i) rows[static_cast<size_t>(t) * d + i] *= token_norms[t];
    }
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::quant
