#include "lib/engine/serving_engine.h"

#include <cblas.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <Eigen/Core>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/engine/calibrate.h"
#include "lib/engine/vector_exp.h"
#include "lib/kvformat/block_key.h"
#include "lib/kvformat/block_layout.h"
#include "lib/kvformat/float16.h"
#include "lib/model/thread_pool.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::engine {
namespace {

using kvformat::BlockKind;
using kvformat::Int2Params;
using kvformat::KvSide;
using kvformat::SegmentKind;

// Counts appended tokens and stores nothing: the prefill's own copy of the KV lives in the
// stored-prefix attention; the decode cache is rebuilt from the blocks.
class CountingKvCache : public model::KvCache {
 public:
  CountingKvCache(int num_layers, int64_t initial) : length_(num_layers, initial) {}
  absl::Status AppendLayer(int layer, const float*, const float*, int num_tokens) override {
    length_[layer] += num_tokens;
    return absl::OkStatus();
  }
  absl::Status Attend(int, const float*, int, float, float*) override {
    return absl::InternalError("CountingKvCache cannot attend (prefill uses ChunkAttention)");
  }
  int64_t Length(int layer) const override { return length_[layer]; }

 private:
  std::vector<int64_t> length_;
};

// Per layer during a prefill: every token's K/V in its stored form (what later chunks attend to),
// in the rotated basis, plus what the blocks are cut from.
struct LayerState {
  std::vector<float> stored_k, stored_v;  // [n][Hkv][D] stored form (bf16 rows or dequantised)
  std::vector<float> bf16_k, bf16_v;      // [n][Hkv][D] rotated bf16 rows (sink and tail blocks)
  std::vector<uint8_t> codes_k, codes_v;  // [n][Hkv][D/4] INT2 codes (tokens >= sink)
  std::vector<Int2Params> params_k, params_v;  // [n][Hkv]
};

// Chunked prefill attention (see serving_engine.h): queries of the chunk attend to the stored
// form of every earlier token and to the chunk itself in BF16, causally.
class StoredPrefixAttention : public model::ChunkAttention {
 public:
  StoredPrefixAttention(const model::ModelConfig& config, const quant::CodecSpec& spec,
                        const quant::ThreeTierCacheConfig& tiers, std::vector<LayerState>* layers)
      : config_(config), spec_(spec), tiers_(tiers), layers_(*layers) {}

  absl::Status Attend(int layer, int64_t pos0, int64_t t, const float* q, const float* k,
                      const float* v, float* out) override {
    const int hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;
    const int group = hq / hkv;
    const int64_t kv_row = int64_t{hkv} * d, q_row = int64_t{hq} * d;
    LayerState& L = layers_[layer];
    if (static_cast<int64_t>(L.stored_k.size()) != pos0 * kv_row) {
      return absl::InternalError(absl::StrCat("prefill layer ", layer, " holds ",
                                              L.stored_k.size() / kv_row, " tokens, chunk at ",
                                              pos0));
    }
    const float* rot_k = Rotation(tiers_.rotations.k, layer);
    const float* rot_v = Rotation(tiers_.rotations.v, layer);
    // The chunk's rotated bf16 rows go after the stored prefix, in place: keys [0, pos0 + t).
    // Once attended, they are kept as bf16 rows for the blocks and replaced by their stored form.
    const int64_t n = pos0 + t;
    L.stored_k.resize(n * kv_row);
    L.stored_v.resize(n * kv_row);
    float* const keys = L.stored_k.data();
    float* const values = L.stored_v.data();
    // Rows (here and below) are independent and each is made on one thread, over the CPU pool.
    model::RunOnCpuPool([&](int worker, int workers) {
      for (int64_t r = worker; r < t * hkv; r += workers) {
        quant::RotateRowToBf16(k + r * d, rot_k, d, keys + pos0 * kv_row + r * d);
        quant::RotateRowToBf16(v + r * d, rot_v, d, values + pos0 * kv_row + r * d);
      }
    });
    // q~ = q R_K (scores are unchanged by the rotation).
    std::vector<float> qr(t * q_row);
    Multiply(q, t * hq, d, rot_k, /*transpose=*/false, qr.data());
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<float> scores(t * n), out_rot(t * q_row);
    for (int h = 0; h < hq; ++h) {
      const int g = h / group;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, n, d, scale, qr.data() + h * d,
                  q_row, keys + g * d, kv_row, 0.0f, scores.data(), n);
      // Causal softmax of each row, the rows shared over the CPU pool (OpenBLAS's threads idle
      // meanwhile). A row is computed on one thread, so the result does not depend on the count.
      model::RunOnCpuPool([&](int worker, int workers) {
        for (int64_t i = worker; i < t; i += workers) {
          CausalSoftmaxRow(scores.data() + i * n, pos0 + i + 1, n);
        }
      });
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, n, 1.0f, scores.data(), n,
                  values + g * d, kv_row, 0.0f, out_rot.data() + h * d, q_row);
    }
    // o = o~ R_V^T.
    Multiply(out_rot.data(), t * hq, d, rot_v, /*transpose=*/true, out);

    // Record the chunk: bf16 rows for BF16 blocks, INT2 codes and the stored form for later
    // chunks (tokens past the sink of a quantising codec are read back dequantised).
    const bool quantises = spec_.id != kvformat::CodecId::kBf16;
    L.bf16_k.insert(L.bf16_k.end(), keys + pos0 * kv_row, keys + n * kv_row);
    L.bf16_v.insert(L.bf16_v.end(), values + pos0 * kv_row, values + n * kv_row);
    L.codes_k.resize(n * hkv * (d / 4));
    L.codes_v.resize(L.codes_k.size());
    L.params_k.resize(n * hkv);
    L.params_v.resize(n * hkv);
    // Tokens past the sink of a quantising codec; the others stay the bf16 rows they are.
    const int64_t first_quantised = quantises ? std::max<int64_t>(pos0, spec_.sink_tokens) : n;
    model::RunOnCpuPool([&](int worker, int workers) {
      for (int64_t pos = first_quantised + worker; pos < n; pos += workers) {
        for (int h = 0; h < hkv; ++h) {
          const int64_t row = pos * kv_row + h * d;
          const int64_t slot = pos * hkv + h;
          uint8_t* ck = L.codes_k.data() + slot * (d / 4);
          uint8_t* cv = L.codes_v.data() + slot * (d / 4);
          quant::EncodePerTokenRow(keys + row, d, tiers_.k_clip_ratio, ck, &L.params_k[slot]);
          quant::EncodePerTokenRow(values + row, d, tiers_.v_clip_ratio, cv, &L.params_v[slot]);
          quant::DecodePerTokenRow(ck, L.params_k[slot], d, keys + row);
          quant::DecodePerTokenRow(cv, L.params_v[slot], d, values + row);
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  // row[0, keys) = softmax(row[0, keys)) and row[keys, n) = 0; the exps through libmvec, their
  // sum in double, in four independent partial sums (one chain of dependent adds was most of
  // the time).
  static void CausalSoftmaxRow(float* row, int64_t keys, int64_t n) {
    Eigen::Map<Eigen::ArrayXf> live(row, keys);
    const float mx = live.maxCoeff();
    ExpShifted({row, static_cast<size_t>(keys)}, mx, 1.0f, {row, static_cast<size_t>(keys)});
    double part[4] = {};
    int64_t j = 0;
    for (; j + 4 <= keys; j += 4) {
      for (int l = 0; l < 4; ++l) part[l] += row[j + l];
    }
    double sum = (part[0] + part[1]) + (part[2] + part[3]);
    for (; j < keys; ++j) sum += row[j];
    live *= static_cast<float>(1.0 / sum);
    std::fill(row + keys, row + n, 0.0f);
  }
  static const float* Rotation(const std::vector<std::vector<float>>& per_layer, int layer) {
    return per_layer.empty() || per_layer[layer].empty() ? nullptr : per_layer[layer].data();
  }
  // y[rows][d] = x[rows][d] * R (or R^T); R == nullptr is the identity.
  static void Multiply(const float* x, int64_t rows, int d, const float* r, bool transpose,
                       float* y) {
    if (r == nullptr) {
      std::copy_n(x, rows * d, y);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose ? CblasTrans : CblasNoTrans, rows, d, d,
                1.0f, x, d, r, d, 0.0f, y, d);
  }

  const model::ModelConfig& config_;
  const quant::CodecSpec& spec_;
  const quant::ThreeTierCacheConfig& tiers_;
  std::vector<LayerState>& layers_;
};

}  // namespace

std::string DefaultCalibrationFor(const std::string& codec) {
  auto spec = quant::FindCodec(codec);
  if (!spec.ok() || !(*spec)->needs_calibration) return "";
  if ((*spec)->k_objective == "qqt") return kDefaultCalibrationPath;
  if ((*spec)->k_objective == "ktk") return kDefaultGramCalibrationPath;
  return "";
}

std::string ResolveCalibrationPath(const std::string& flag, const std::string& model_spec,
                                   const std::string& codec) {
  if (!flag.empty()) return flag;
  return model_spec == "default" ? DefaultCalibrationFor(codec) : "";
}

std::string ResolveWorkerCalibrationPath(const std::string& flag, const std::string& codec,
                                         const std::string& source_dir) {
  if (!flag.empty()) return flag;
  const std::string def = DefaultCalibrationFor(codec);
  if (def.empty()) return "";
  std::error_code ec;
  if (std::filesystem::exists(def, ec)) return def;
  if (!source_dir.empty()) {
    const std::string in_tree = absl::StrCat(source_dir, "/", def);
    if (std::filesystem::exists(in_tree, ec)) return in_tree;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<ServingEngine>> LoadWorkerServingEngine(
    const model::Model* model, const std::string& codec, const std::string& calibration,
    int chunk_tokens, const std::string& source_dir) {
  ServingEngineOptions o;
  o.codec = codec;
  o.chunk_tokens = chunk_tokens;
  o.calibration_path = ResolveWorkerCalibrationPath(calibration, codec, source_dir);
  absl::StatusOr<std::unique_ptr<ServingEngine>> e = ServingEngine::Create(model, o);
  if (!e.ok() && o.calibration_path.empty() && absl::IsFailedPrecondition(e.status())) {
    const std::string def = DefaultCalibrationFor(codec);
    return absl::FailedPreconditionError(absl::StrCat(
        "codec '", codec, "' needs a calibration file: pass --calibration FILE",
        def.empty() ? "" : absl::StrCat(", or create the default ", def,
                                        " (scripts/setup.sh does)"),
        ", or use --codec bf16 (", e.status().message(), ")"));
  }
  return e;
}

absl::StatusOr<std::unique_ptr<ServingEngine>> ServingEngine::Create(
    const model::Model* model, ServingEngineOptions options) {
  if (model == nullptr) return absl::InvalidArgumentError("ServingEngine needs a model");
  if (options.block_tokens <= 0 || options.block_tokens % kvformat::kChannelGroupTokens != 0 ||
      options.chunk_tokens <= 0 || options.chunk_tokens % options.block_tokens != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_tokens (", options.chunk_tokens, ") must be a positive multiple of ",
                     "block_tokens (", options.block_tokens, "), itself a multiple of 32"));
  }
  std::unique_ptr<ServingEngine> engine(new ServingEngine());
  engine->model_ = model;
  OSCARKV_ASSIGN_OR_RETURN(engine->factory_,
                           KvCacheFactory::Create(model->config(), options.codec,
                                                  options.calibration_path,
                                                  ModelFingerprint(*model)));
  const quant::CodecSpec& spec = engine->factory_->spec();
  if (!quant::Servable(spec)) {
    return absl::UnimplementedError(absl::StrCat("codec ", std::string(spec.name),
                                                 " is evaluation-only; serving supports ",
                                                 absl::StrJoin(quant::ServableCodecNames(), ", ")));
  }
  if (spec.sink_tokens % options.block_tokens != 0 && spec.sink_tokens != 0) {
    return absl::InvalidArgumentError("the codec's sink must be a whole number of blocks");
  }
  engine->options_ = std::move(options);
  engine->model_fingerprint_ = ModelFingerprint(*model);  // hashed twice at start-up: ~50 ms
  return engine;
}

int64_t ServingEngine::ReuseBoundary(int64_t prompt_tokens) const {
  // Chunk-aligned, and at least the recent window (at least one token) before the end so the
  // recomputed tail fills the BF16 recent window as a cold prefill would.
  const int64_t keep = std::max(1, codec().recent_tokens);
  const int64_t chunk = options_.chunk_tokens;
  return std::max<int64_t>(0, (prompt_tokens - keep) / chunk * chunk);
}

kvformat::KeyChainParams ServingEngine::KeyParams() const {
  kvformat::KeyChainParams params;
  params.model_fingerprint = model_fingerprint_;
  params.calib_fingerprint = calibration_fingerprint();
  params.codec = codec().id;
  params.block_tokens = options_.block_tokens;
  return params;
}

std::vector<kvformat::BlockKey> ServingEngine::ReusableKeys(
    std::span<const int32_t> prompt) const {
  const int64_t boundary = ReuseBoundary(static_cast<int64_t>(prompt.size()));
  return kvformat::ComputeBlockKeys(KeyParams(), prompt.first(boundary));
}

absl::StatusOr<PrefillResult> ServingEngine::Prefill(std::span<const int32_t> prompt,
                                                     std::span<const kvformat::BlockView> reused,
                                                     bool build_sequence,
                                                     const ChunkLogitsSink* on_chunk_logits,
                                                     const PrefillStopCheck* stop_check) const {
  const model::ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) return absl::InvalidArgumentError("prefill of an empty prompt");
  const int bt = options_.block_tokens;
  const int64_t boundary = ReuseBoundary(n);
  const int64_t reusable_blocks = boundary / bt;
  const std::vector<kvformat::BlockKey> keys = ReusableKeys(prompt);

  // Reused blocks: a leading run that matches this prompt's keys, cut to a chunk boundary.
  int64_t use = 0;
  while (use < static_cast<int64_t>(reused.size()) && use < reusable_blocks) {
    const kvformat::BlockHeader& h = reused[use].header;
    if (!(h.key == keys[use]) || h.codec != static_cast<uint16_t>(codec().id) ||
        h.model_fingerprint != model_fingerprint_ ||
        h.calib_fingerprint != calibration_fingerprint() ||
        h.first_position != static_cast<uint32_t>(use * bt) || h.token_count != bt ||
        h.layer_count != c.num_layers || h.kv_heads != c.num_kv_heads ||
        h.head_dim != c.head_dim) {
      return absl::FailedPreconditionError(
          absl::StrCat("reused block ", use, " does not belong to this prompt/engine"));
    }
    ++use;
  }
  use = use * bt / options_.chunk_tokens * options_.chunk_tokens / bt;
  const int64_t start = use * bt;

  const int hkv = c.num_kv_heads, d = c.head_dim;
  const int64_t kv_row = int64_t{hkv} * d;
  std::vector<LayerState> layers(c.num_layers);
  // Seed the stored prefix from the reused blocks.
  for (int64_t b = 0; b < use; ++b) {
    const kvformat::BlockLayout layout = kvformat::BlockLayout::Of(reused[b].header);
    const auto* payload = reinterpret_cast<const uint8_t*>(reused[b].payload.data());
    const bool bf16 = reused[b].header.block_kind == static_cast<uint8_t>(BlockKind::kBf16);
    for (int l = 0; l < c.num_layers; ++l) {
      LayerState& L = layers[l];
      const size_t at = L.stored_k.size();
      L.stored_k.resize(at + bt * kv_row);
      L.stored_v.resize(at + bt * kv_row);
      for (int side = 0; side < 2; ++side) {
        const KvSide kv = side == 0 ? KvSide::kK : KvSide::kV;
        float* dst = (side == 0 ? L.stored_k : L.stored_v).data() + at;
        for (int h = 0; h < hkv; ++h) {
          const uint8_t* codes = payload + layout.CodesOffset(l, kv, h);
          for (int r = 0; r < bt; ++r) {
            float* row = dst + r * kv_row + h * d;
            if (bf16) {
              const auto* bits = reinterpret_cast<const uint16_t*>(codes) + r * d;
              for (int i = 0; i < d; ++i) row[i] = kvformat::Bf16BitsToFloat(bits[i]);
            } else {
              Int2Params p;
              std::memcpy(&p, payload + layout.ParamsOffset(l, kv, h) + r * sizeof(Int2Params),
                          sizeof(p));
              quant::DecodePerTokenRow(codes + r * (d / 4), p, d, row);
            }
          }
        }
      }
    }
  }

  quant::ThreeTierCacheConfig tiers = factory_->tier_config();
  StoredPrefixAttention attention(c, codec(), tiers, &layers);
  auto sequence = model_->NewSequence(std::make_unique<CountingKvCache>(c.num_layers, start));
  PrefillResult result;
  result.reused_tokens = start;
  std::vector<float> logits;
  const bool all_logits = on_chunk_logits != nullptr;
  for (int64_t c0 = start; c0 < n; c0 += options_.chunk_tokens) {
    const int64_t c1 = std::min<int64_t>(n, c0 + options_.chunk_tokens);
    if (stop_check != nullptr && *stop_check) OSCARKV_RETURN_IF_ERROR((*stop_check)());
    OSCARKV_RETURN_IF_ERROR(model_->PrefillChunk(*sequence, prompt.subspan(c0, c1 - c0),
                                                 attention, all_logits, &logits));
    if (all_logits) OSCARKV_RETURN_IF_ERROR((*on_chunk_logits)(c0, logits));
  }
  result.computed_tokens = n - start;
  if (all_logits) logits.erase(logits.begin(), logits.end() - c.vocab_size);  // the last row
  result.last_logits = std::move(logits);

  // Cut the blocks.
  const int64_t num_blocks = (n + bt - 1) / bt;
  std::vector<kvformat::BlockView> views;
  for (int64_t b = 0; b < num_blocks; ++b) {
    SequenceBlock block;
    block.reusable = b < reusable_blocks;
    if (b < use) {
      OSCARKV_ASSIGN_OR_RETURN(
          block.bytes, kvformat::SerializeBlock(
                           kvformat::BlockFields{
                               .codec = codec().id,
                               .kind = static_cast<BlockKind>(reused[b].header.block_kind),
                               .model_fingerprint = model_fingerprint_,
                               .calib_fingerprint = calibration_fingerprint(),
                               .first_position = static_cast<uint32_t>(b * bt),
                               .token_count = bt,
                               .layer_count = c.num_layers,
                               .kv_heads = hkv,
                               .head_dim = d,
                               .key = keys[b],
                               .prev_key = reused[b].header.prev_key},
                           reused[b].payload));
      block.key = keys[b];
      result.blocks.push_back(std::move(block));
      continue;
    }
    const int64_t first = b * bt;
    const int tokens = static_cast<int>(std::min<int64_t>(bt, n - first));
    const bool quantised = codec().id != kvformat::CodecId::kBf16 &&
                           first >= codec().sink_tokens && block.reusable;
    const BlockKind kind = quantised ? BlockKind::kQuantized : BlockKind::kBf16;
    const kvformat::BlockLayout layout{codec().id, kind, c.num_layers, hkv, d, tokens};
    std::vector<std::byte> payload(layout.payload_bytes());
    auto* out = reinterpret_cast<uint8_t*>(payload.data());
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerState& L = layers[l];
      for (int side = 0; side < 2; ++side) {
        const KvSide kv = side == 0 ? KvSide::kK : KvSide::kV;
        for (int h = 0; h < hkv; ++h) {
          uint8_t* codes = out + layout.CodesOffset(l, kv, h);
          for (int r = 0; r < tokens; ++r) {
            const int64_t pos = first + r;
            // Token rows are relative to `start` in bf16_* (computed tokens only).
            if (!quantised) {
              const float* row = (side == 0 ? L.bf16_k : L.bf16_v).data() +
                                 (pos - start) * kv_row + h * d;
              auto* bits = reinterpret_cast<uint16_t*>(codes) + r * d;
              for (int i = 0; i < d; ++i) bits[i] = kvformat::FloatToBf16Bits(row[i]);
            } else {
              const int64_t slot = pos * hkv + h;
              std::memcpy(codes + r * (d / 4),
                          (side == 0 ? L.codes_k : L.codes_v).data() + slot * (d / 4), d / 4);
              std::memcpy(out + layout.ParamsOffset(l, kv, h) + r * sizeof(Int2Params),
                          &(side == 0 ? L.params_k : L.params_v)[slot], sizeof(Int2Params));
            }
          }
        }
      }
    }
    kvformat::BlockFields fields{.codec = codec().id,
                                 .kind = kind,
                                 .model_fingerprint = model_fingerprint_,
                                 .calib_fingerprint = calibration_fingerprint(),
                                 .first_position = static_cast<uint32_t>(first),
                                 .token_count = tokens,
                                 .layer_count = c.num_layers,
                                 .kv_heads = hkv,
                                 .head_dim = d};
    if (block.reusable) {
      fields.key = keys[b];
      fields.prev_key = b == 0 ? kvformat::ChainSeed(KeyParams()) : keys[b - 1];
      block.key = keys[b];
    }
    OSCARKV_ASSIGN_OR_RETURN(block.bytes, kvformat::SerializeBlock(fields, payload));
    result.blocks.push_back(std::move(block));
  }

  // The decode cache is rebuilt from the blocks, exactly as a decode worker rebuilds it.
  if (!build_sequence) return result;
  for (const SequenceBlock& block : result.blocks) {
    OSCARKV_ASSIGN_OR_RETURN(kvformat::BlockView view, kvformat::ParseBlock(block.bytes, {}));
    views.push_back(view);
  }
  OSCARKV_ASSIGN_OR_RETURN(result.sequence, SequenceFromBlocks(views));
  return result;
}

absl::StatusOr<std::unique_ptr<model::Sequence>> ServingEngine::SequenceFromBlocks(
    std::span<const kvformat::BlockView> blocks) const {
  const model::ModelConfig& c = model_->config();
  const int hkv = c.num_kv_heads, d = c.head_dim;
  const int64_t kv_row = int64_t{hkv} * d;
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<model::KvCache> cache, factory_->NewCache());
  auto& tiers = static_cast<QuantKvCache&>(*cache).mutable_tiers();
  int64_t position = 0;
  std::vector<float> k, v;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const kvformat::BlockHeader& h = blocks[b].header;
    if (h.codec != static_cast<uint16_t>(codec().id) || h.model_fingerprint != model_fingerprint_ ||
        h.calib_fingerprint != calibration_fingerprint()) {
      return absl::FailedPreconditionError(
          absl::StrCat("block ", b, " is for another codec, model or calibration"));
    }
    if (h.first_position != position || h.layer_count != c.num_layers || h.kv_heads != hkv ||
        h.head_dim != d) {
      return absl::InvalidArgumentError(absl::StrCat("block ", b, " starts at ", h.first_position,
                                                     ", expected ", position, " (or bad shape)"));
    }
    const kvformat::BlockLayout layout = kvformat::BlockLayout::Of(h);
    const auto* payload = reinterpret_cast<const uint8_t*>(blocks[b].payload.data());
    const int tokens = h.token_count;
    for (int l = 0; l < c.num_layers; ++l) {
      if (h.block_kind == static_cast<uint8_t>(BlockKind::kBf16)) {
        k.assign(tokens * kv_row, 0.0f);
        v.assign(tokens * kv_row, 0.0f);
        for (int side = 0; side < 2; ++side) {
          const KvSide kv = side == 0 ? KvSide::kK : KvSide::kV;
          float* dst = side == 0 ? k.data() : v.data();
          for (int head = 0; head < hkv; ++head) {
            const auto* bits =
                reinterpret_cast<const uint16_t*>(payload + layout.CodesOffset(l, kv, head));
            for (int r = 0; r < tokens; ++r) {
              for (int i = 0; i < d; ++i) {
                dst[r * kv_row + head * d + i] = kvformat::Bf16BitsToFloat(bits[r * d + i]);
              }
            }
          }
        }
        OSCARKV_RETURN_IF_ERROR(tiers.AppendRotated(l, k.data(), v.data(), tokens));
      } else {
        std::vector<const uint8_t*> k_segments(hkv), v_segments(hkv);
        for (int head = 0; head < hkv; ++head) {
          k_segments[head] = payload + layout.SegmentOffset(l, KvSide::kK, head);
          v_segments[head] = payload + layout.SegmentOffset(l, KvSide::kV, head);
        }
        OSCARKV_RETURN_IF_ERROR(tiers.ImportHistory(l, k_segments, v_segments, tokens));
      }
    }
    position += tokens;
  }
  return model_->NewSequence(std::move(cache));
}

absl::Status ServingEngine::DecodeStep(std::span<model::Sequence* const> seqs,
                                       std::span<const int32_t> tokens,
                                       std::vector<float>* logits) const {
  return model_->DecodeStep(seqs, tokens, logits);
}

int64_t ServingEngine::SequenceKvBytes(model::Sequence& seq) const {
  return static_cast<QuantKvCache&>(seq.cache()).tiers().BytesInUse();
}

int64_t ServingEngine::KvBytesAt(int64_t tokens) const {
  const model::ModelConfig& c = model_->config();
  absl::StatusOr<int64_t> bytes =
      quant::BytesInUseAt(codec(), c.num_layers, c.num_kv_heads, c.head_dim, tokens);
  // Create() refuses every codec it is not computed for (Servable), and lengths are >= 0.
  CHECK(bytes.ok()) << bytes.status();
  return *bytes;
}

}  // namespace oscarkv::engine
