#include "lib/quant/three_tier_cache.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <deque>

#include "absl/strings/str_cat.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/float16.h"

namespace oscarkv::quant {

using kernels::kPageTokens;
using kvformat::CodecId;
using kvformat::Int2Params;
using kvformat::SegmentKind;

namespace {

enum class Family {
  kAllBf16,           // M0
  kPerTokenNoWindow,  // M1, M2
  kPerTokenWindowed,  // M3-M6
  kKiviResidual,      // M7: K block flush, V sliding
  kTileResidual,      // M8: K and V flushed together in tiles
};

Family FamilyOf(const CodecSpec& spec) {
  if (spec.id == CodecId::kBf16) return Family::kAllBf16;
  if (spec.residual_tokens > 0) {
    return spec.token_norms ? Family::kTileResidual : Family::kKiviResidual;
  }
  if (spec.sink_tokens == 0 && spec.recent_tokens == 0) return Family::kPerTokenNoWindow;
  return Family::kPerTokenWindowed;
}

void CheckOk(kernels::KvQuantStatus s) {
  CHECK(s == kernels::KvQuantStatus::kOk) << kernels::KvQuantStatusString(s);
}

}  // namespace

TierWindows WindowsAt(const CodecSpec& spec, int n) {
  TierWindows w;
  switch (FamilyOf(spec)) {
    case Family::kAllBf16:
      break;
    case Family::kPerTokenNoWindow:
      w.k_quant_end = w.v_quant_end = n;
      break;
    case Family::kPerTokenWindowed: {
      const int s = spec.sink_tokens;
      const int over = std::max(0, n - s - spec.recent_tokens);
      w.quant_begin = s;
      w.k_quant_end = w.v_quant_end = s + over / kPageTokens * kPageTokens;
      break;
    }
    case Family::kKiviResidual:
      w.k_quant_end = n / spec.residual_tokens * spec.residual_tokens;
      w.v_quant_end = std::max(0, n - spec.residual_tokens);
      break;
    case Family::kTileResidual:
      w.k_quant_end = w.v_quant_end = n / spec.residual_tokens * spec.residual_tokens;
      break;
  }
  return w;
}

absl::StatusOr<int64_t> BytesInUseAt(const CodecSpec& spec, int num_layers, int num_kv_heads,
                                     int head_dim, int64_t tokens) {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || tokens < 0 || tokens > INT_MAX) {
    return absl::InvalidArgumentError(
        "BytesInUseAt: shapes must be > 0 and tokens in [0, INT_MAX]");
  }
  const int64_t bf16_page = kernels::Bf16PageUnitBytes(head_dim) * num_kv_heads;
  const int64_t int2_page = kernels::Int2PageUnitBytes(head_dim) * num_kv_heads;
  auto pages = [](int64_t t) { return (t + kPageTokens - 1) / kPageTokens; };
  int64_t per_layer = 0;
  switch (FamilyOf(spec)) {
    case Family::kAllBf16:
      per_layer = pages(tokens) * bf16_page;
      break;
    case Family::kPerTokenNoWindow:
      per_layer = pages(tokens) * int2_page;
      break;
    case Family::kPerTokenWindowed: {
      // The sink, whole INT2 pages of history, then the recent rows.
      const TierWindows w = WindowsAt(spec, static_cast<int>(tokens));
      const int64_t sink = std::min<int64_t>(tokens, w.quant_begin);
      const int64_t history = w.k_quant_end - w.quant_begin;
      per_layer = (pages(sink) + pages(tokens - sink - history)) * bf16_page +
                  history / kPageTokens * int2_page;
      break;
    }
    case Family::kKiviResidual:
    case Family::kTileResidual:
      return absl::UnimplementedError(absl::StrCat(
          "BytesInUseAt: not computed for the residual codec ", std::string(spec.name)));
  }
  return per_layer * num_layers;
}

void RowTimesMatrix(const float* x, const float* m, int head_dim, float* y) {
  constexpr int kColumns = 8;
  float on_stack[256];
  std::vector<float> on_heap;  // head_dim > 256: no model has one, but nothing overflows
  float* acc = on_stack;
  if (head_dim > 256) {
    on_heap.resize(head_dim);
    acc = on_heap.data();
  }
  std::fill_n(acc, head_dim, 0.0f);
  const int vector_end = head_dim / kColumns * kColumns;
  for (int i = 0; i < head_dim; ++i) {
    const float xi = x[i];
    const float* mi = m + static_cast<int64_t>(i) * head_dim;
    for (int j = 0; j < vector_end; j += kColumns) {
      for (int l = 0; l < kColumns; ++l) acc[j + l] += xi * mi[j + l];
    }
    for (int j = vector_end; j < head_dim; ++j) acc[j] += xi * mi[j];
  }
  std::copy_n(acc, head_dim, y);
}

std::vector<float> TransposedSquare(const float* m, int head_dim) {
  std::vector<float> t(static_cast<size_t>(head_dim) * head_dim);
  for (int r = 0; r < head_dim; ++r) {
    for (int c = 0; c < head_dim; ++c) t[c * head_dim + r] = m[r * head_dim + c];
  }
  return t;
}

void RotateRowToBf16(const float* x, const float* rotation, int head_dim, float* out) {
  if (rotation == nullptr) {
    for (int j = 0; j < head_dim; ++j) out[j] = kvformat::RoundToBf16(x[j]);
    return;
  }
  RowTimesMatrix(x, rotation, head_dim, out);
  for (int j = 0; j < head_dim; ++j) out[j] = kvformat::RoundToBf16(out[j]);
}

void EncodePerTokenRow(const float* row, int head_dim, float clip_ratio, uint8_t* codes,
                       Int2Params* params) {
  float x[256];
  float scratch[256];
  uint8_t seg[256 / 4 + sizeof(Int2Params)];
  std::memcpy(x, row, sizeof(float) * head_dim);
  kernels::ClipRow(x, head_dim, clip_ratio, scratch);
  CheckOk(kernels::EncodeSegment(SegmentKind::kInt2PerToken, x, 1, head_dim, head_dim, seg));
  std::memcpy(codes, seg, head_dim / 4);
  std::memcpy(params, seg + head_dim / 4, sizeof(Int2Params));
}

void DecodePerTokenRow(const uint8_t* codes, Int2Params params, int head_dim, float* out) {
  uint8_t seg[256 / 4 + sizeof(Int2Params)];
  std::memcpy(seg, codes, head_dim / 4);
  std::memcpy(seg + head_dim / 4, &params, sizeof(Int2Params));
  CheckOk(kernels::DecodeSegment(SegmentKind::kInt2PerToken, seg, 1, head_dim, out, head_dim));
}

float OmniTokenNorm(const float* rows, int num_heads, int head_dim) {
  double sum = 0.0;
  for (int i = 0; i < num_heads * head_dim; ++i) sum += static_cast<double>(rows[i]) * rows[i];
  const float n = static_cast<float>(std::sqrt(sum));
  return n > 0.0f ? n : 1.0f;
}

// State of one layer. Paged members serve the per-token families, the rest the residual ones.
struct ThreeTierCache::Layer {
  int tokens = 0;
  // BF16 pages: sink (or everything, for bf16) and the recent window, 8 tokens each.
  std::vector<uint8_t> bf16_pool;
  std::vector<int32_t> bf16_free;
  std::vector<int32_t> sink_pages;
  std::deque<int32_t> recent_pages;
  int sink_count = 0;
  int recent_count = 0;
  // INT2 history pages, ids 0..int2_pages-1 in token order.
  std::vector<uint8_t> int2_pool;
  int int2_pages = 0;
  int int2_count = 0;
  // Residual codecs, per head: quantised K (kInt2ChannelGroup groups back to back), quantised V
  // (kInt2TokenGroup codes and params), BF16 residual rows ([rows][D] bf16 bits).
  std::vector<std::vector<uint8_t>> k_groups, v_codes;
  std::vector<std::vector<Int2Params>> v_params;
  std::vector<std::vector<uint16_t>> k_res, v_res;
  std::vector<float> norms;  // OScaR: one per token (all tokens)
  int k_quant = 0;
  int v_quant = 0;
};

absl::StatusOr<ThreeTierCacheConfig> ThreeTierCacheConfigFromCodecs(
    std::span<const Codec* const> per_layer, int num_kv_heads) {
  if (per_layer.empty() || per_layer[0] == nullptr) {
    return absl::InvalidArgumentError("ThreeTierCacheConfigFromCodecs: no codecs");
  }
  ThreeTierCacheConfig config;
  const Codec& first = *per_layer[0];
  config.num_layers = static_cast<int>(per_layer.size());
  config.num_kv_heads = num_kv_heads;
  config.head_dim = first.head_dim();
  config.codec = first.spec().id;
  config.k_clip_ratio = first.clip_ratio(KvSide::kKey);
  config.v_clip_ratio = first.clip_ratio(KvSide::kValue);
  const size_t dd = static_cast<size_t>(first.head_dim()) * first.head_dim();
  for (const Codec* c : per_layer) {
    if (c == nullptr || c->spec().id != first.spec().id || c->head_dim() != first.head_dim() ||
        c->clip_ratio(KvSide::kKey) != config.k_clip_ratio ||
        c->clip_ratio(KvSide::kValue) != config.v_clip_ratio) {
      return absl::InvalidArgumentError(
          "ThreeTierCacheConfigFromCodecs: codecs differ in kind, head_dim or clip ratios");
    }
    const float* rk = c->key_rotation();
    const float* rv = c->value_rotation();
    config.rotations.k.push_back(rk == nullptr ? std::vector<float>() : std::vector<float>(rk, rk + dd));
    config.rotations.v.push_back(rv == nullptr ? std::vector<float>() : std::vector<float>(rv, rv + dd));
  }
  return config;
}

absl::StatusOr<std::unique_ptr<ThreeTierCache>> ThreeTierCache::Create(
    ThreeTierCacheConfig config) {
  if (config.num_layers <= 0 || config.num_kv_heads <= 0) {
    return absl::InvalidArgumentError("ThreeTierCache: num_layers and num_kv_heads must be > 0");
  }
  if (config.head_dim <= 0 || config.head_dim % 32 != 0 || config.head_dim > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("ThreeTierCache: head_dim ", config.head_dim, " not a multiple of 32 <= 256"));
  }
  OSCARKV_ASSIGN_OR_RETURN(const CodecSpec* spec,
                           FindCodecById(static_cast<uint16_t>(config.codec)));
  const size_t dd = static_cast<size_t>(config.head_dim) * config.head_dim;
  for (const auto* rots : {&config.rotations.k, &config.rotations.v}) {
    if (!rots->empty() && static_cast<int>(rots->size()) != config.num_layers) {
      return absl::InvalidArgumentError("ThreeTierCache: rotations need one entry per layer");
    }
    for (const auto& r : *rots) {
      if (!r.empty() && r.size() != dd) {
        return absl::InvalidArgumentError("ThreeTierCache: a rotation is not [D][D]");
      }
    }
  }
  if (spec->residual_tokens > 0 && spec->residual_tokens % kvformat::kChannelGroupTokens != 0) {
    return absl::InvalidArgumentError("ThreeTierCache: residual not a multiple of 32 tokens");
  }
  if (FamilyOf(*spec) == Family::kPerTokenWindowed && spec->sink_tokens % kPageTokens != 0) {
    return absl::InvalidArgumentError("ThreeTierCache: sink not a multiple of the page size");
  }
  return std::unique_ptr<ThreeTierCache>(new ThreeTierCache(std::move(config), spec));
}

ThreeTierCache::ThreeTierCache(ThreeTierCacheConfig config, const CodecSpec* spec)
    : config_(std::move(config)),
      spec_(spec),
      k_clip_(config_.k_clip_ratio > 0.0f ? config_.k_clip_ratio : spec->k_clip_ratio),
      v_clip_(config_.v_clip_ratio > 0.0f ? config_.v_clip_ratio : spec->v_clip_ratio) {
  for (int l = 0; l < config_.num_layers; ++l) {
    auto layer = std::make_unique<Layer>();
    const int h = config_.num_kv_heads;
    layer->k_groups.resize(h);
    layer->v_codes.resize(h);
    layer->v_params.resize(h);
    layer->k_res.resize(h);
    layer->v_res.resize(h);
    layers_.push_back(std::move(layer));
  }
}

ThreeTierCache::~ThreeTierCache() = default;

int ThreeTierCache::tokens(int layer) const { return layers_.at(layer)->tokens; }

absl::Status ThreeTierCache::Append(int layer, const float* k, const float* v, int num_tokens) {
  if (layer < 0 || layer >= config_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("ThreeTierCache::Append: bad layer ", layer));
  }
  if (num_tokens < 0 || (num_tokens > 0 && (k == nullptr || v == nullptr))) {
    return absl::InvalidArgumentError("ThreeTierCache::Append: null k/v or negative count");
  }
  const int64_t stride = static_cast<int64_t>(config_.num_kv_heads) * config_.head_dim;
  for (int t = 0; t < num_tokens; ++t) AppendToken(layer, k + t * stride, v + t * stride);
  return absl::OkStatus();
}

void ThreeTierCache::AppendToken(int layer_index, const float* k, const float* v) {
  const int d = config_.head_dim;
  const int hkv = config_.num_kv_heads;
  const auto& rk = config_.rotations.k;
  const auto& rv = config_.rotations.v;
  const float* rot_k = rk.empty() || rk[layer_index].empty() ? nullptr : rk[layer_index].data();
  const float* rot_v = rv.empty() || rv[layer_index].empty() ? nullptr : rv[layer_index].data();
  std::vector<float> kr(static_cast<size_t>(hkv) * d), vr(kr.size());
  for (int h = 0; h < hkv; ++h) {
    RotateRowToBf16(k + h * d, rot_k, d, kr.data() + h * d);
    RotateRowToBf16(v + h * d, rot_v, d, vr.data() + h * d);
  }
  AppendRotatedToken(layer_index, kr, vr);
}

absl::Status ThreeTierCache::AppendRotated(int layer, const float* k, const float* v,
                                           int num_tokens) {
  if (layer < 0 || layer >= config_.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("ThreeTierCache::AppendRotated: bad layer ", layer));
  }
  if (num_tokens < 0 || (num_tokens > 0 && (k == nullptr || v == nullptr))) {
    return absl::InvalidArgumentError("ThreeTierCache::AppendRotated: null k/v or negative count");
  }
  const int64_t stride = static_cast<int64_t>(config_.num_kv_heads) * config_.head_dim;
  std::vector<float> kr(stride), vr(stride);
  for (int t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < stride; ++i) {
      kr[i] = kvformat::RoundToBf16(k[t * stride + i]);
      vr[i] = kvformat::RoundToBf16(v[t * stride + i]);
    }
    AppendRotatedToken(layer, kr, vr);
  }
  return absl::OkStatus();
}

absl::Status ThreeTierCache::ImportHistory(int layer, std::span<const uint8_t* const> k_segments,
                                           std::span<const uint8_t* const> v_segments,
                                           int num_tokens) {
  if (layer < 0 || layer >= config_.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("ThreeTierCache::ImportHistory: bad layer ", layer));
  }
  if (FamilyOf(*spec_) != Family::kPerTokenWindowed) {
    return absl::UnimplementedError(absl::StrCat("ThreeTierCache::ImportHistory: codec ",
                                                 std::string(spec_->name),
                                                 " has no per-token INT2 history to import"));
  }
  const int hkv = config_.num_kv_heads;
  if (static_cast<int>(k_segments.size()) != hkv || static_cast<int>(v_segments.size()) != hkv) {
    return absl::InvalidArgumentError("ThreeTierCache::ImportHistory: one segment per KV head");
  }
  Layer& L = *layers_[layer];
  if (num_tokens < 0 || num_tokens % kPageTokens != 0 || L.recent_count != 0 ||
      L.sink_count != spec_->sink_tokens) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ThreeTierCache::ImportHistory: needs a full sink, an empty recent window and a multiple "
        "of ", kPageTokens, " tokens (sink ", L.sink_count, ", recent ", L.recent_count,
        ", tokens ", num_tokens, ")"));
  }
  const int d = config_.head_dim;
  const int64_t int2_unit = kernels::Int2PageUnitBytes(d);
  const int64_t int2_page = int2_unit * hkv;
  const size_t code_bytes = static_cast<size_t>(d / 4);
  for (int first = 0; first < num_tokens; first += kPageTokens) {
    L.int2_pool.resize(L.int2_pool.size() + int2_page);
    const int32_t page = L.int2_pages++;
    for (int h = 0; h < hkv; ++h) {
      uint8_t* unit = L.int2_pool.data() + page * int2_page + h * int2_unit;
      // A kInt2PerToken segment is codes [T][D/4] then params [T]; a page unit holds the same
      // two arrays for 8 tokens, for K then V.
      const auto copy_side = [&](const uint8_t* segment, size_t codes_at, size_t params_at) {
        std::memcpy(unit + codes_at, segment + first * code_bytes, kPageTokens * code_bytes);
        std::memcpy(unit + params_at,
                    segment + num_tokens * code_bytes + first * sizeof(Int2Params),
                    kPageTokens * sizeof(Int2Params));
      };
      copy_side(k_segments[h], kernels::Int2PageKCodesOffset(d), kernels::Int2PageKParamsOffset(d));
      copy_side(v_segments[h], kernels::Int2PageVCodesOffset(d), kernels::Int2PageVParamsOffset(d));
    }
  }
  L.int2_count += num_tokens;
  L.tokens += num_tokens;
  return absl::OkStatus();
}

void ThreeTierCache::AppendRotatedToken(int layer_index, std::span<const float> kr,
                                        std::span<const float> vr) {
  Layer& L = *layers_[layer_index];
  const int d = config_.head_dim;
  const int hkv = config_.num_kv_heads;
  const Family family = FamilyOf(*spec_);
  const int64_t bf16_unit = kernels::Bf16PageUnitBytes(d);
  const int64_t int2_unit = kernels::Int2PageUnitBytes(d);
  const int64_t bf16_page = bf16_unit * hkv;
  const int64_t int2_page = int2_unit * hkv;
  auto alloc_bf16 = [&]() {
    if (!L.bf16_free.empty()) {
      const int32_t p = L.bf16_free.back();
      L.bf16_free.pop_back();
      return p;
    }
    const int32_t p = static_cast<int32_t>(L.bf16_pool.size() / bf16_page);
    L.bf16_pool.resize(L.bf16_pool.size() + bf16_page);
    return p;
  };
  auto write_bf16 = [&](int32_t page, int row) {
    for (int h = 0; h < hkv; ++h) {
      uint8_t* unit = L.bf16_pool.data() + page * bf16_page + h * bf16_unit;
      auto* kd = reinterpret_cast<uint16_t*>(unit + kernels::Bf16PageKOffset(d)) + row * d;
      auto* vd = reinterpret_cast<uint16_t*>(unit + kernels::Bf16PageVOffset(d)) + row * d;
      for (int c = 0; c < d; ++c) {
        kd[c] = kvformat::FloatToBf16Bits(kr[h * d + c]);
        vd[c] = kvformat::FloatToBf16Bits(vr[h * d + c]);
      }
    }
  };
  auto new_int2_page = [&]() {
    L.int2_pool.resize(L.int2_pool.size() + int2_page);
    return L.int2_pages++;
  };
  auto write_int2_row = [&](int32_t page, int row, int h, const float* krow, const float* vrow) {
    uint8_t* unit = L.int2_pool.data() + page * int2_page + h * int2_unit;
    Int2Params kp, vp;
    EncodePerTokenRow(krow, d, k_clip_,
                      unit + kernels::Int2PageKCodesOffset(d) + row * (d / 4), &kp);
    EncodePerTokenRow(vrow, d, v_clip_,
                      unit + kernels::Int2PageVCodesOffset(d) + row * (d / 4), &vp);
    std::memcpy(unit + kernels::Int2PageKParamsOffset(d) + row * sizeof(Int2Params), &kp,
                sizeof(kp));
    std::memcpy(unit + kernels::Int2PageVParamsOffset(d) + row * sizeof(Int2Params), &vp,
                sizeof(vp));
  };

  const int pos = L.tokens;
  switch (family) {
    case Family::kAllBf16: {
      if (L.sink_count % kPageTokens == 0) L.sink_pages.push_back(alloc_bf16());
      write_bf16(L.sink_pages.back(), L.sink_count % kPageTokens);
      ++L.sink_count;
      break;
    }
    case Family::kPerTokenNoWindow: {
      if (L.int2_count % kPageTokens == 0) new_int2_page();
      for (int h = 0; h < hkv; ++h) {
        write_int2_row(L.int2_pages - 1, L.int2_count % kPageTokens, h, kr.data() + h * d,
                       vr.data() + h * d);
      }
      ++L.int2_count;
      break;
    }
    case Family::kPerTokenWindowed: {
      if (pos < spec_->sink_tokens) {
        if (L.sink_count % kPageTokens == 0) L.sink_pages.push_back(alloc_bf16());
        write_bf16(L.sink_pages.back(), L.sink_count % kPageTokens);
        ++L.sink_count;
        break;
      }
      if (L.recent_count % kPageTokens == 0) L.recent_pages.push_back(alloc_bf16());
      write_bf16(L.recent_pages.back(), L.recent_count % kPageTokens);
      ++L.recent_count;
      if (L.recent_count >= spec_->recent_tokens + kPageTokens) {
        // Demote the oldest recent page: one BF16 page -> one INT2 page (clip, quantise, pack).
        const int32_t old = L.recent_pages.front();
        L.recent_pages.pop_front();
        const int32_t page = new_int2_page();
        float krow[256], vrow[256];
        for (int h = 0; h < hkv; ++h) {
          const uint8_t* unit = L.bf16_pool.data() + old * bf16_page + h * bf16_unit;
          const auto* ks = reinterpret_cast<const uint16_t*>(unit + kernels::Bf16PageKOffset(d));
          const auto* vs = reinterpret_cast<const uint16_t*>(unit + kernels::Bf16PageVOffset(d));
          for (int r = 0; r < kPageTokens; ++r) {
            for (int c = 0; c < d; ++c) {
              krow[c] = kvformat::Bf16BitsToFloat(ks[r * d + c]);
              vrow[c] = kvformat::Bf16BitsToFloat(vs[r * d + c]);
            }
            write_int2_row(page, r, h, krow, vrow);
          }
        }
        L.bf16_free.push_back(old);
        L.recent_count -= kPageTokens;
        L.int2_count += kPageTokens;
      }
      break;
    }
    case Family::kKiviResidual:
    case Family::kTileResidual: {
      const int r_tokens = spec_->residual_tokens;
      float norm = 1.0f;
      if (spec_->token_norms) {
        norm = OmniTokenNorm(kr.data(), hkv, d);
        L.norms.push_back(norm);
      }
      for (int h = 0; h < hkv; ++h) {
        for (int c = 0; c < d; ++c) {
          L.k_res[h].push_back(kvformat::FloatToBf16Bits(kr[h * d + c] / norm));
          L.v_res[h].push_back(kvformat::FloatToBf16Bits(vr[h * d + c]));
        }
      }
      const int k_res_rows = static_cast<int>(L.k_res[0].size()) / d;
      const int v_res_rows = static_cast<int>(L.v_res[0].size()) / d;
      std::vector<float> rows;
      if (k_res_rows == r_tokens) {
        // K block flush: R tokens -> R/32 channel groups per head.
        const size_t group_bytes =
            kvformat::SegmentBytes(SegmentKind::kInt2ChannelGroup, r_tokens, d);
        for (int h = 0; h < hkv; ++h) {
          rows.resize(L.k_res[h].size());
          for (size_t i = 0; i < rows.size(); ++i) rows[i] = kvformat::Bf16BitsToFloat(L.k_res[h][i]);
          const size_t at = L.k_groups[h].size();
          L.k_groups[h].resize(at + group_bytes);
          CheckOk(kernels::EncodeSegment(SegmentKind::kInt2ChannelGroup, rows.data(), r_tokens, d,
                                         d, L.k_groups[h].data() + at));
          L.k_res[h].clear();
        }
        L.k_quant += r_tokens;
      }
      // V: KIVI quantises the oldest token once more than R are kept; OScaR flushes R at once.
      const int v_flush = family == Family::kKiviResidual
                              ? std::max(0, v_res_rows - r_tokens)
                              : (v_res_rows == r_tokens ? r_tokens : 0);
      if (v_flush > 0) {
        const int groups = d / kvformat::kTokenGroupChannels;
        std::vector<uint8_t> seg(kvformat::SegmentBytes(SegmentKind::kInt2TokenGroup, 1, d));
        float row[256];
        for (int h = 0; h < hkv; ++h) {
          for (int t = 0; t < v_flush; ++t) {
            for (int c = 0; c < d; ++c) row[c] = kvformat::Bf16BitsToFloat(L.v_res[h][t * d + c]);
            CheckOk(kernels::EncodeSegment(SegmentKind::kInt2TokenGroup, row, 1, d, d, seg.data()));
            L.v_codes[h].insert(L.v_codes[h].end(), seg.begin(), seg.begin() + d / 4);
            const auto* p = reinterpret_cast<const Int2Params*>(seg.data() + d / 4);
            L.v_params[h].insert(L.v_params[h].end(), p, p + groups);
          }
          L.v_res[h].erase(L.v_res[h].begin(), L.v_res[h].begin() + v_flush * d);
        }
        L.v_quant += v_flush;
      }
      break;
    }
  }
  ++L.tokens;
}

absl::Status ThreeTierCache::ReadSeen(int layer, int head, std::vector<float>* k,
                                      std::vector<float>* v,
                                      std::vector<float>* token_scale) const {
  if (layer < 0 || layer >= config_.num_layers || head < 0 || head >= config_.num_kv_heads) {
    return absl::InvalidArgumentError("ThreeTierCache::ReadSeen: bad layer or head");
  }
  const Layer& L = *layers_[layer];
  const int d = config_.head_dim;
  const int n = L.tokens;
  k->assign(static_cast<size_t>(n) * d, 0.0f);
  v->assign(k->size(), 0.0f);
  token_scale->clear();
  const Family family = FamilyOf(*spec_);
  if (family == Family::kKiviResidual || family == Family::kTileResidual) {
    if (L.k_quant > 0) {
      CheckOk(kernels::DecodeSegment(SegmentKind::kInt2ChannelGroup, L.k_groups[head].data(),
                                     L.k_quant, d, k->data(), d));
    }
    for (size_t i = 0; i < L.k_res[head].size(); ++i) {
      (*k)[static_cast<size_t>(L.k_quant) * d + i] = kvformat::Bf16BitsToFloat(L.k_res[head][i]);
    }
    if (L.v_quant > 0) {
      std::vector<uint8_t> seg(L.v_codes[head]);
      const auto* p = reinterpret_cast<const uint8_t*>(L.v_params[head].data());
      seg.insert(seg.end(), p, p + L.v_params[head].size() * sizeof(Int2Params));
      CheckOk(kernels::DecodeSegment(SegmentKind::kInt2TokenGroup, seg.data(), L.v_quant, d,
                                     v->data(), d));
    }
    for (size_t i = 0; i < L.v_res[head].size(); ++i) {
      (*v)[static_cast<size_t>(L.v_quant) * d + i] = kvformat::Bf16BitsToFloat(L.v_res[head][i]);
    }
    if (spec_->token_norms) *token_scale = L.norms;
    return absl::OkStatus();
  }
  const int64_t bf16_unit = kernels::Bf16PageUnitBytes(d);
  const int64_t int2_unit = kernels::Int2PageUnitBytes(d);
  const int hkv = config_.num_kv_heads;
  auto read_bf16 = [&](int32_t page, int row, int pos) {
    const uint8_t* unit = L.bf16_pool.data() + page * bf16_unit * hkv + head * bf16_unit;
    const auto* ks = reinterpret_cast<const uint16_t*>(unit + kernels::Bf16PageKOffset(d));
    const auto* vs = reinterpret_cast<const uint16_t*>(unit + kernels::Bf16PageVOffset(d));
    for (int c = 0; c < d; ++c) {
      (*k)[static_cast<size_t>(pos) * d + c] = kvformat::Bf16BitsToFloat(ks[row * d + c]);
      (*v)[static_cast<size_t>(pos) * d + c] = kvformat::Bf16BitsToFloat(vs[row * d + c]);
    }
  };
  int pos = 0;
  for (int i = 0; i < L.sink_count; ++i, ++pos) read_bf16(L.sink_pages[i / kPageTokens], i % kPageTokens, pos);
  for (int i = 0; i < L.int2_count; ++i, ++pos) {
    const uint8_t* unit = L.int2_pool.data() + (i / kPageTokens) * int2_unit * hkv + head * int2_unit;
    const int r = i % kPageTokens;
    Int2Params kp, vp;
    std::memcpy(&kp, unit + kernels::Int2PageKParamsOffset(d) + r * 4, 4);
    std::memcpy(&vp, unit + kernels::Int2PageVParamsOffset(d) + r * 4, 4);
    DecodePerTokenRow(unit + kernels::Int2PageKCodesOffset(d) + r * (d / 4), kp, d,
                      k->data() + static_cast<size_t>(pos) * d);
    DecodePerTokenRow(unit + kernels::Int2PageVCodesOffset(d) + r * (d / 4), vp, d,
                      v->data() + static_cast<size_t>(pos) * d);
  }
  for (int i = 0; i < L.recent_count; ++i, ++pos) {
    read_bf16(L.recent_pages[i / kPageTokens], i % kPageTokens, pos);
  }
  return absl::OkStatus();
}

absl::Status ThreeTierCache::Attend(int layer, const float* q, int num_q_heads, float* out) const {
  if (layer < 0 || layer >= config_.num_layers || q == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("ThreeTierCache::Attend: bad layer or null pointer");
  }
  const int hkv = config_.num_kv_heads;
  if (num_q_heads <= 0 || num_q_heads % hkv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ThreeTierCache::Attend: ", num_q_heads, " query heads for ", hkv, " KV heads"));
  }
  const Layer& L = *layers_[layer];
  const int d = config_.head_dim;
  const int g = num_q_heads / hkv;
  const float sm_scale = config_.sm_scale > 0.0f ? config_.sm_scale
                                                 : 1.0f / std::sqrt(static_cast<float>(d));
  const auto& rk = config_.rotations.k;
  const auto& rv = config_.rotations.v;
  const float* rot_k = rk.empty() || rk[layer].empty() ? nullptr : rk[layer].data();
  const float* rot_v = rv.empty() || rv[layer].empty() ? nullptr : rv[layer].data();
  // q~ = q R_K in float.
  std::vector<float> qr(static_cast<size_t>(num_q_heads) * d);
  for (int h = 0; h < num_q_heads; ++h) {
    if (rot_k == nullptr) {
      std::copy_n(q + h * d, d, qr.data() + h * d);
    } else {
      RowTimesMatrix(q + h * d, rot_k, d, qr.data() + h * d);
    }
  }
  std::vector<float> out_rot(qr.size(), 0.0f);
  const Family family = FamilyOf(*spec_);
  if (family == Family::kKiviResidual || family == Family::kTileResidual) {
    // Dequantise-then-attend: quantised K range and BF16 residual as two segments, LSE-merged.
    std::vector<float> k, v, scale;
    std::vector<kernels::AttentionState> a(g), b(g);
    const int split = L.k_quant;
    for (int h = 0; h < hkv; ++h) {
      OSCARKV_RETURN_IF_ERROR(ReadSeen(layer, h, &k, &v, &scale));
      const float* s = scale.empty() ? nullptr : scale.data();
      const float* qh = qr.data() + static_cast<size_t>(h) * g * d;
      kernels::AttendFloatRows(qh, g, d, k.data(), v.data(), d, s, split, sm_scale, a.data());
      kernels::AttendFloatRows(qh, g, d, k.data() + static_cast<size_t>(split) * d,
                               v.data() + static_cast<size_t>(split) * d, d,
                               s == nullptr ? nullptr : s + split, L.tokens - split, sm_scale,
                               b.data());
      for (int i = 0; i < g; ++i) {
        kernels::MergeAttentionState(a[i], b[i]);
        kernels::FinalizeAttentionState(a[i], d, out_rot.data() + (static_cast<size_t>(h) * g + i) * d);
      }
    }
  } else {
    // Paged per-token path through the decode attention reference.
    std::vector<int32_t> bf16_indices(L.sink_pages.begin(), L.sink_pages.end());
    bf16_indices.insert(bf16_indices.end(), L.recent_pages.begin(), L.recent_pages.end());
    std::vector<int32_t> int2_indices(L.int2_pages);
    for (int i = 0; i < L.int2_pages; ++i) int2_indices[i] = i;
    const int32_t bf16_indptr[2] = {0, static_cast<int32_t>(bf16_indices.size())};
    const int32_t int2_indptr[2] = {0, L.int2_pages};
    const int32_t bf16_tokens = L.sink_count + L.recent_count;
    const int32_t int2_tokens = L.int2_count;
    const kernels::DecodePlan plan =
        kernels::PlanDecodeAttention(config_.plan, 1, &bf16_tokens, &int2_tokens);
    std::vector<float> partial_out(plan.PartialOutFloats(num_q_heads, d));
    std::vector<float> partial_lse(plan.PartialLseFloats(num_q_heads));
    kernels::DecodeAttentionParams p;
    p.num_seqs = 1;
    p.num_q_heads = num_q_heads;
    p.num_kv_heads = hkv;
    p.head_dim = d;
    p.sm_scale = sm_scale;
    p.q = qr.data();
    p.q_seq_stride = static_cast<int64_t>(num_q_heads) * d;
    const int64_t bu = kernels::Bf16PageUnitBytes(d), iu = kernels::Int2PageUnitBytes(d);
    // An empty tier is passed as absent (its pool may not exist yet).
    if (bf16_tokens > 0) {
      p.bf16 = {bf16_indptr, bf16_indices.data(), &bf16_tokens, L.bf16_pool.data(), bu * hkv, bu};
    }
    if (int2_tokens > 0) {
      p.int2 = {int2_indptr, int2_indices.data(), &int2_tokens, L.int2_pool.data(), iu * hkv, iu};
    }
    p.work = plan.work.data();
    p.seq_work_indptr = plan.seq_work_indptr.data();
    p.num_work = plan.num_work();
    p.partial_out = partial_out.data();
    p.partial_lse = partial_lse.data();
    p.out = out_rot.data();
    p.out_seq_stride = p.q_seq_stride;
    if (const char* err = config_.run_on_threads
                              ? kernels::DecodeAttentionRef(p, config_.run_on_threads)
                              : kernels::DecodeAttentionRef(p)) {
      return absl::InternalError(absl::StrCat("ThreeTierCache::Attend: ", err));
    }
  }
  // o = o~ R_V^T, R_V^T made once for the heads (a row times it vectorises; the sums keep the
  // textbook loop's order).
  const std::vector<float> rot_v_t =
      rot_v == nullptr ? std::vector<float>() : TransposedSquare(rot_v, d);
  for (int h = 0; h < num_q_heads; ++h) {
    const float* o = out_rot.data() + static_cast<size_t>(h) * d;
    if (rot_v == nullptr) {
      std::copy_n(o, d, out + h * d);
    } else {
      RowTimesMatrix(o, rot_v_t.data(), d, out + h * d);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ThreeTierCache::Segment> ThreeTierCache::ExportSegment(int layer, KvSide side,
                                                                      int head, int first,
                                                                      int tokens) const {
  if (layer < 0 || layer >= config_.num_layers || head < 0 || head >= config_.num_kv_heads) {
    return absl::InvalidArgumentError("ThreeTierCache::ExportSegment: bad layer or head");
  }
  const Layer& L = *layers_[layer];
  const int d = config_.head_dim;
  const int hkv = config_.num_kv_heads;
  const int end = first + tokens;
  if (tokens <= 0 || first < 0 || end > L.tokens) {
    return absl::OutOfRangeError(absl::StrCat("ThreeTierCache::ExportSegment: range [", first,
                                              ", ", end, ") outside [0, ", L.tokens, ")"));
  }
  const bool is_k = side == KvSide::kKey;
  const TierWindows w = WindowsAt(*spec_, L.tokens);
  const int q_end = is_k ? w.k_quant_end : w.v_quant_end;
  const bool all_quantised = first >= w.quant_begin && end <= q_end;
  const bool none_quantised = end <= w.quant_begin || first >= q_end;
  if (!all_quantised && !none_quantised) {
    return absl::OutOfRangeError("ThreeTierCache::ExportSegment: range spans two tiers");
  }
  Segment seg;
  const Family family = FamilyOf(*spec_);
  const bool residual = family == Family::kKiviResidual || family == Family::kTileResidual;
  if (none_quantised) {
    seg.kind = SegmentKind::kBf16Rows;
    seg.bytes.resize(kvformat::SegmentBytes(seg.kind, tokens, d));
    auto* dst = reinterpret_cast<uint16_t*>(seg.bytes.data());
    const int64_t bu = kernels::Bf16PageUnitBytes(d);
    for (int pos = first; pos < end; ++pos, dst += d) {
      if (residual) {
        const auto& rows = is_k ? L.k_res[head] : L.v_res[head];
        const int row = pos - q_end;
        std::memcpy(dst, rows.data() + static_cast<size_t>(row) * d, 2 * d);
        continue;
      }
      int page, row;
      if (pos < L.sink_count) {
        page = L.sink_pages[pos / kPageTokens];
        row = pos % kPageTokens;
      } else {
        const int i = pos - q_end;
        page = L.recent_pages[i / kPageTokens];
        row = i % kPageTokens;
      }
      const uint8_t* unit = L.bf16_pool.data() + page * bu * hkv + head * bu +
                            (is_k ? kernels::Bf16PageKOffset(d) : kernels::Bf16PageVOffset(d));
      std::memcpy(dst, unit + static_cast<size_t>(row) * d * 2, 2 * d);
    }
    return seg;
  }
  if (!residual) {
    seg.kind = SegmentKind::kInt2PerToken;
    seg.bytes.resize(kvformat::SegmentBytes(seg.kind, tokens, d));
    const int64_t iu = kernels::Int2PageUnitBytes(d);
    uint8_t* codes = seg.bytes.data();
    uint8_t* params = seg.bytes.data() + static_cast<size_t>(tokens) * (d / 4);
    for (int pos = first; pos < end; ++pos) {
      const int i = pos - w.quant_begin;
      const uint8_t* unit = L.int2_pool.data() + (i / kPageTokens) * iu * hkv + head * iu;
      const int r = i % kPageTokens;
      const int64_t c_off = is_k ? kernels::Int2PageKCodesOffset(d) : kernels::Int2PageVCodesOffset(d);
      const int64_t p_off = is_k ? kernels::Int2PageKParamsOffset(d) : kernels::Int2PageVParamsOffset(d);
      std::memcpy(codes + static_cast<size_t>(pos - first) * (d / 4), unit + c_off + r * (d / 4),
                  d / 4);
      std::memcpy(params + static_cast<size_t>(pos - first) * 4, unit + p_off + r * 4, 4);
    }
    return seg;
  }
  if (is_k) {
    const int cg = kvformat::kChannelGroupTokens;
    if (first % cg != 0 || tokens % cg != 0) {
      return absl::InvalidArgumentError(
          "ThreeTierCache::ExportSegment: channel-group range not aligned to 32 tokens");
    }
    seg.kind = SegmentKind::kInt2ChannelGroup;
    const size_t group = kvformat::SegmentBytes(seg.kind, cg, d);
    const auto& src = L.k_groups[head];
    seg.bytes.assign(src.begin() + first / cg * group, src.begin() + end / cg * group);
    return seg;
  }
  seg.kind = SegmentKind::kInt2TokenGroup;
  const int groups = d / kvformat::kTokenGroupChannels;
  const auto& codes = L.v_codes[head];
  const auto* params = reinterpret_cast<const uint8_t*>(L.v_params[head].data());
  seg.bytes.assign(codes.begin() + static_cast<size_t>(first) * (d / 4),
                   codes.begin() + static_cast<size_t>(end) * (d / 4));
  seg.bytes.insert(seg.bytes.end(), params + static_cast<size_t>(first) * groups * 4,
                   params + static_cast<size_t>(end) * groups * 4);
  return seg;
}

std::vector<float> ThreeTierCache::TokenNorms(int layer, int first, int tokens) const {
  const Layer& L = *layers_.at(layer);
  if (L.norms.empty() || first < 0 || tokens <= 0 || first + tokens > L.tokens) return {};
  return std::vector<float>(L.norms.begin() + first, L.norms.begin() + first + tokens);
}

int64_t ThreeTierCache::BytesInUse() const {
  const int d = config_.head_dim;
  const int hkv = config_.num_kv_heads;
  int64_t total = 0;
  for (const auto& lp : layers_) {
    const Layer& L = *lp;
    total += static_cast<int64_t>(L.sink_pages.size() + L.recent_pages.size()) *
             kernels::Bf16PageUnitBytes(d) * hkv;
    total += static_cast<int64_t>(L.int2_pages) * kernels::Int2PageUnitBytes(d) * hkv;
    for (int h = 0; h < hkv; ++h) {
      total += static_cast<int64_t>(L.k_groups[h].size() + L.v_codes[h].size() +
                                    L.v_params[h].size() * sizeof(Int2Params));
      total += static_cast<int64_t>(L.k_res[h].size() + L.v_res[h].size()) * 2;
    }
    total += static_cast<int64_t>(L.norms.size()) * 4;
  }
  return total;
}

int64_t ThreeTierCache::BytesAllocated() const {
  int64_t total = 0;
  for (const auto& lp : layers_) {
    const Layer& L = *lp;
    total += static_cast<int64_t>(L.bf16_pool.capacity() + L.int2_pool.capacity());
    for (int h = 0; h < config_.num_kv_heads; ++h) {
      total += static_cast<int64_t>(L.k_groups[h].capacity() + L.v_codes[h].capacity() +
                                    L.v_params[h].capacity() * sizeof(Int2Params) +
                                    (L.k_res[h].capacity() + L.v_res[h].capacity()) * 2);
    }
    total += static_cast<int64_t>(L.norms.capacity()) * 4;
  }
  return total;
}

double ThreeTierCache::BitsPerElement() const {
  const double elements = 2.0 * config_.num_layers * config_.num_kv_heads * config_.head_dim *
                          std::max(1, tokens(0));
  return static_cast<double>(BytesInUse()) * 8.0 / elements;
}

}  // namespace oscarkv::quant
