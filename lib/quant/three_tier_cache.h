// The three-tier KV cache of one sequence on the host (ARCHITECTURE.md §4, quant.md A.7, B.4, C):
// what decode attention reads, and the reference that the decode-equivalent emulation
// (decode_emulation.h) must match token for token.
//
// Per layer and KV head, by codec family (CodecSpec from codec_spec.h):
//   * bf16 (M0): every token in BF16 pages.
//   * windowed per-token codecs (M3-M6, sink S = 64, recent W = 256): BF16 sink pages for
//     positions < S, a BF16 recent window, and INT2 history pages between. After each appended
//     token, when the recent window holds W + 8 tokens, its oldest 8 (one page) are clipped,
//     quantised and packed into one INT2 page (one step, per head, K and V). So a query over n
//     tokens sees history [S, S + 8 * floor(max(0, n - S - W) / 8)) quantised and 256..263 recent
//     tokens in BF16.
//   * unwindowed per-token codecs (M1, M2): every token is quantised as it is appended, so the
//     current token also attends to its own quantised K/V (quant.md E.1: no BF16 windows).
//   * kivi2 (M7, residual R = 128): K stays BF16 until R tokens accumulate, then the R tokens are
//     quantised per channel in 32-token groups; V keeps the last R tokens BF16 and quantises
//     (per token, 32-channel groups) the oldest one as it slides out (quant.md C).
//   * oscar-tns (M8, residual R = 256): K and V residual flushed together in R-token tiles; K is
//     divided by its omni-token norm n_t (L2 over all heads) before storage, and n_t multiplies
//     the score (quant.md B.3, B.4).
// The cache state depends only on the number of tokens appended, so a prefill chunk is appended
// exactly as the same tokens one by one (the serving placement of quant.md A.7 gives the same
// state).
//
// Values: appended K/V are post-RoPE floats in the model basis. The cache rotates each row
// (x <- x * R, R_K for K, R_V for V, per layer) and rounds it to bf16 (the HP dtype); quantisation
// always starts from that bf16 row. Attend() rotates the query by R_K (float) and returns the
// output rotated back by R_V^T, so callers only see the model basis.
//
// Storage follows lib/kvformat: per-token history lives in the 8-token pages of
// kernels/attention/decode_attention.h (each page half is a kInt2PerToken segment), BF16 rows in
// BF16 pages, KIVI/OScaR K in kInt2ChannelGroup groups and V in kInt2TokenGroup rows, so blocks
// can be cut without re-quantising.
//
// Thread-compatible: const methods may run concurrently; Append needs exclusive access.
#ifndef OSCARKV_LIB_QUANT_THREE_TIER_CACHE_H_
#define OSCARKV_LIB_QUANT_THREE_TIER_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/attention/decode_attention.h"
#include "lib/kvformat/int2_block.h"
#include "lib/quant/codec.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::quant {

// Per-layer rotations the cache applies, row-vector convention x <- x * R. Each entry is
// [D][D] f32 row-major (R[i][j] at i * D + j), or empty for the identity. Either vector may be
// empty (identity for every layer) or hold one entry per layer.
struct TierRotations {
  std::vector<std::vector<float>> k;  // R_K per layer
  std::vector<std::vector<float>> v;  // R_V per layer
};

// Which tokens a query sees quantised. For a sequence of n tokens (the query's own token
// included), K token j is read dequantised iff quant_begin <= j < k_quant_end, V token j iff
// quant_begin <= j < v_quant_end; every other token is read from its BF16 row.
struct TierWindows {
  int quant_begin = 0;
  int k_quant_end = 0;
  int v_quant_end = 0;
};
TierWindows WindowsAt(const CodecSpec& spec, int n);

// What ThreeTierCache::BytesInUse() reports once every layer holds `tokens` tokens (the state
// depends on the count alone), without building a cache: what a sequence will occupy at the
// length it may grow to. kUnimplemented for the residual codecs (kivi2, oscar-tns), which no
// server serves; kInvalidArgument for shapes <= 0 or tokens outside [0, INT_MAX].
absl::StatusOr<int64_t> BytesInUseAt(const CodecSpec& spec, int num_layers, int num_kv_heads,
                                     int head_dim, int64_t tokens);

// ---- Row-level steps shared with decode_emulation (exactly what the cache does) ----

// y[D] = x[D] * M (M [D][D] row-major): y[j] = x[0] M[0][j] + x[1] M[1][j] + ... in that order
// (the textbook loop's bits), computed eight columns at a time so that it vectorises.
void RowTimesMatrix(const float* x, const float* m, int head_dim, float* y);
// M^T of a square [D][D] row-major matrix (x M^T as RowTimesMatrix(x, M^T)).
std::vector<float> TransposedSquare(const float* m, int head_dim);
// out[D] = bf16(x[D] * R) (R [D][D] row-major, nullptr = identity).
void RotateRowToBf16(const float* x, const float* rotation, int head_dim, float* out);
// Per-token INT2 of one bf16 row: clip at `clip_ratio` (>= 1: none), quantise, pack. Writes the
// D/4 code bytes and the params.
void EncodePerTokenRow(const float* row, int head_dim, float clip_ratio, uint8_t* codes,
                       kvformat::Int2Params* params);
// x_hat of one packed per-token row.
void DecodePerTokenRow(const uint8_t* codes, kvformat::Int2Params params, int head_dim,
                       float* out);
// OScaR omni-token norm of one token's rotated bf16 K rows (all heads): L2 norm, or 1 if zero.
float OmniTokenNorm(const float* rows, int num_heads, int head_dim);

struct ThreeTierCacheConfig {
  int num_layers = 0;    // L > 0
  int num_kv_heads = 0;  // Hkv > 0
  int head_dim = 0;      // D: a multiple of 32, <= 256 (64 and 128 served)
  // Codec (quant.md E.1). Default: oscar (M6).
  kvformat::CodecId codec = kvformat::CodecId::kOscar;
  // Rotations (see TierRotations). Default: identity. Codecs with RotationKind::kNone must leave
  // them empty; others should pass their Codec's matrices.
  TierRotations rotations;
  // Per-row clip ratios (quant.md A.4); a calibration may tune them (Codec::clip_ratio).
  // Default: -1 = the spec's k_clip_ratio / v_clip_ratio.
  float k_clip_ratio = -1.0f;
  float v_clip_ratio = -1.0f;
  // Score scale of Attend. Default: 0 = 1/sqrt(head_dim).
  float sm_scale = 0.0f;
  // Split plan of the per-token decode attention. Default: DecodePlanConfig defaults.
  kernels::DecodePlanConfig plan;
  // Runs the per-token decode attention's splits on several threads (serving passes
  // model::RunOnCpuPool); the result is the same bits as on one. Default: unset, one thread.
  kernels::RunOnThreads run_on_threads;
};

// A config whose codec, rotations and clip ratios come from one Codec per layer (codec.h; all of
// the same spec and head_dim). kInvalidArgument if the list is empty, has a null entry or mixes
// codecs or head dims.
absl::StatusOr<ThreeTierCacheConfig> ThreeTierCacheConfigFromCodecs(
    std::span<const Codec* const> per_layer, int num_kv_heads);

class ThreeTierCache {
 public:
  // kInvalidArgument for bad shapes, an unknown codec or rotations of the wrong size.
  static absl::StatusOr<std::unique_ptr<ThreeTierCache>> Create(ThreeTierCacheConfig config);
  ~ThreeTierCache();
  ThreeTierCache(const ThreeTierCache&) = delete;
  ThreeTierCache& operator=(const ThreeTierCache&) = delete;

  // Appends `num_tokens` tokens to `layer`: k and v are [num_tokens][Hkv][D] f32, post-RoPE, in
  // the model basis (not rotated). kInvalidArgument on a bad layer or null pointer.
  absl::Status Append(int layer, const float* k, const float* v, int num_tokens);

  // Appends tokens whose rows are already in the rotated basis (k~ = k R_K, v~ = v R_V), e.g.
  // BF16 rows read back from a block; values are rounded to bf16. Same layout and errors as
  // Append.
  absl::Status AppendRotated(int layer, const float* k, const float* v, int num_tokens);

  // Imports `num_tokens` (a multiple of 8) tokens of per-token INT2 history as stored in blocks:
  // one kInt2PerToken segment of num_tokens tokens per KV head for K and for V. Allowed right
  // after the sink is complete and before any recent token (rebuilding a cache from blocks).
  // kUnimplemented for codecs without per-token history (bf16, int2-naive/-hadamard, kivi2,
  // oscar-tns); kFailedPrecondition when the cache is not at that point; kInvalidArgument for a
  // bad layer or segment count.
  absl::Status ImportHistory(int layer, std::span<const uint8_t* const> k_segments,
                             std::span<const uint8_t* const> v_segments, int num_tokens);

  // Decode attention of one query token over everything appended to `layer` (the query's own
  // token must already be appended). q: [num_q_heads][D] f32, model basis; num_q_heads a multiple
  // of Hkv (GQA); scores scaled by config.sm_scale. out: [num_q_heads][D] f32, model basis.
  absl::Status Attend(int layer, const float* q, int num_q_heads, float* out) const;

  // The K/V rows attention reads for `layer`, `head`, in position order, in the rotated basis:
  // BF16 rows widened, quantised rows dequantised. k, v: [tokens][D]. token_scale: [tokens] score
  // multipliers (OScaR norms) or empty. For tests and the emulation cross-check.
  absl::Status ReadSeen(int layer, int head, std::vector<float>* k, std::vector<float>* v,
                        std::vector<float>* token_scale) const;

  // One (layer, K|V, head) token range as a kvformat segment, in the kind those tokens are stored
  // in now: kBf16Rows for BF16 rows (sink, recent, residual, codec bf16), else the codec's history
  // kind (kInt2PerToken, kInt2ChannelGroup for KIVI/OScaR K, kInt2TokenGroup for their V). The
  // bytes are exactly kvformat::SegmentBytes(kind, tokens, D), so blocks are cut without
  // re-quantising. OScaR K rows are stored divided by their token norms (TokenNorms gives them).
  // kOutOfRange if [first, first + tokens) is empty, past the end or spans two tiers;
  // kInvalidArgument for channel-group ranges not aligned to 32 tokens or a bad layer/head.
  struct Segment {
    kvformat::SegmentKind kind;
    std::vector<uint8_t> bytes;
  };
  absl::StatusOr<Segment> ExportSegment(int layer, KvSide side, int head, int first,
                                        int tokens) const;
  // OScaR norms of tokens [first, first + tokens) of `layer` (empty for other codecs).
  std::vector<float> TokenNorms(int layer, int first, int tokens) const;

  const ThreeTierCacheConfig& config() const { return config_; }
  int tokens(int layer) const;
  const CodecSpec& spec() const { return *spec_; }
  // Bytes of live storage (pages in use counted whole, residual rows, norms), all layers.
  int64_t BytesInUse() const;
  // Bytes reserved (page pools including free pages, vector capacities), all layers.
  int64_t BytesAllocated() const;
  // BytesInUse() * 8 / (elements stored = 2 * L * Hkv * D * tokens(0)).
  double BitsPerElement() const;

 private:
  struct Layer;
  ThreeTierCache(ThreeTierCacheConfig config, const CodecSpec* spec);
  void AppendToken(int layer, const float* k, const float* v);
  // kr, vr: [Hkv][D] rotated, bf16-representable rows of one token.
  void AppendRotatedToken(int layer, std::span<const float> kr, std::span<const float> vr);

  ThreeTierCacheConfig config_;
  const CodecSpec* spec_;
  float k_clip_;
  float v_clip_;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_THREE_TIER_CACHE_H_
