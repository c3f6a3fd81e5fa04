#include "lib/model_gpu/gpu_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_attention_cuda.h"
#include "kernels/model/model_kernels_cuda.h"
#include "kernels/quant/kv_quant_cuda.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/model_gpu/block_import.h"
#include "lib/model_gpu/random_fill.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::model_gpu {

namespace k = ::oscarkv::kernels;

// Device views of one step's int32 metadata (offsets into meta_) plus host-side counts.
struct GpuModel::StepMeta {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  // BF16 rows written this step: ranges [row_begin, row_begin + count) of the step's rows, whose
  // page ids / rows start at index `meta_index` of bf16_page / bf16_row.
  struct WriteRange {
    int64_t row_begin = 0, count = 0, meta_index = 0;
  };
  std::vector<WriteRange> writes;
  const int32_t* bf16_page = nullptr;
  const int32_t* bf16_row = nullptr;
  // Prefill: history rows [hist_begin, hist_begin + 8 * hist_pages) into INT2 pages.
  int64_t hist_begin = 0, num_hist_pages = 0;
  const int32_t* hist_pages = nullptr;
  // Decode: demotions.
  int64_t num_demote = 0;
  const int32_t* demote_src = nullptr;
  // Prefill: bf16 copies of rows [tail_begin, rows) to tail_out ([L][2][rows - tail_begin][kvdim]).
  int64_t tail_begin = 0;
  uint16_t* tail_out = nullptr;
  const int32_t* demote_dst = nullptr;
  // Decode attention tables and plan.
  const int32_t* bf16_indptr = nullptr;
  const int32_t* bf16_indices = nullptr;
  const int32_t* bf16_tokens = nullptr;
  const int32_t* int2_indptr = nullptr;
  const int32_t* int2_indices = nullptr;
  const int32_t* int2_tokens = nullptr;
  const k::DecodeWorkItem* work = nullptr;
  const int32_t* seq_work_indptr = nullptr;
  int num_work = 0;
  bool one_split_per_seq = false;  // DecodePlan::OneSplitPerSequence()
};

namespace {

// out = in * r per row of `heads` rows a token (in_token_stride floats between tokens).
k::RotateRowsParams RotateJob(const float* in, int64_t in_token_stride, int64_t tokens, int heads,
                              int head_dim, const float* r, float* out) {
  k::RotateRowsParams p;
  p.in = in;
  p.in_token_stride = in_token_stride;
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = head_dim;
  p.rotation = r;
  p.out = out;
  return p;
}

// Appends `values` to `meta` and returns their offset.
int64_t Push(std::vector<int32_t>& meta, std::span<const int32_t> values) {
  const int64_t at = static_cast<int64_t>(meta.size());
  meta.insert(meta.end(), values.begin(), values.end());
  return at;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const model::ModelConfig& config,
                                                           GpuWeights weights,
                                                           const quant::ThreeTierCacheConfig& tiers,
                                                           const GpuModelOptions& options) {
  const quant::CodecSpec& spec = quant::GetCodecSpec(tiers.codec);
  OSCARKV_ASSIGN_OR_RETURN(KvPageTableConfig pc, GpuPageShape(config, spec));
  const bool windowed = pc.windowed;
  if (options.max_batch <= 0 || options.max_prompt_tokens <= 0 || options.ffn_chunk_tokens <= 0 ||
      options.kv_budget_bytes <= 0) {
    return absl::InvalidArgumentError("GPU model: batch, prompt, chunk and budget must be > 0");
  }
  OSCARKV_CUDA_OK(cudaSetDevice(options.device));
  pc.budget_bytes = options.kv_budget_bytes;
  // INT2 pages can use the whole budget; BF16 pages of a windowed codec at most the windows of
  // max_batch sequences (or the budget, if smaller).
  const int64_t bf16_by_budget = options.kv_budget_bytes / Bf16PageBytes(pc);
  const int64_t bf16_windows = int64_t{options.max_batch} *
                               PagesForTokens(pc, int64_t{1} << 40).bf16;
  pc.bf16_pages = static_cast<int32_t>(
      std::min<int64_t>(windowed ? std::min(bf16_by_budget, bf16_windows) : bf16_by_budget,
                        INT32_MAX));
  pc.int2_pages = windowed ? static_cast<int32_t>(std::min<int64_t>(
                                 options.kv_budget_bytes / Int2PageBytes(pc), INT32_MAX))
                           : 0;
  OSCARKV_ASSIGN_OR_RETURN(KvPageTable pages, KvPageTable::Create(pc));
  std::unique_ptr<GpuModel> m(new GpuModel(config, std::move(weights), std::move(pages), options));
  m->windowed_ = windowed;
  const ClipRatios clips = EffectiveClipRatios(tiers);
  m->k_clip_ = clips.k;
  m->v_clip_ = clips.v;
  OSCARKV_RETURN_IF_ERROR(m->Init(tiers));
  return m;
}

GpuModel::~GpuModel() {
  for (cudaEvent_t e : cache_events_) cudaEventDestroy(e);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status GpuModel::Init(const quant::ThreeTierCacheConfig& tiers) {
  const model::ModelConfig& c = config_;
  OSCARKV_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cache_events_.resize(2 * c.num_layers);
  for (cudaEvent_t& e : cache_events_) OSCARKV_CUDA_OK(cudaEventCreate(&e));
  OSCARKV_CUBLAS_OK(cublasCreate(&cublas_));
  OSCARKV_CUBLAS_OK(cublasSetStream(cublas_, stream_));
  // An explicit workspace (after cublasSetStream, which resets it): otherwise cuBLAS gives each
  // captured decode graph a workspace of its own. With 32 MiB the gpu tests' figures on the H200
  // equal those with cuBLAS's own pool (bench/e2e/results/session29/cublas_workspace/).
  OSCARKV_RETURN_IF_ERROR(cublas_workspace_.Allocate(size_t{32} << 20, "cuBLAS workspace"));
  OSCARKV_CUBLAS_OK(
      cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_.bytes()));
  OSCARKV_CUDA_OK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount,
                                         options_.device));
  int cc_major = 0, cc_minor = 0;
  OSCARKV_CUDA_OK(
      cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, options_.device));
  OSCARKV_CUDA_OK(
      cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, options_.device));
  numerics_tag_ = GpuNumericsTag(cc_major, cc_minor, num_sms_);

  // Rotations: [L][4][D][D] = R_K, R_V, R_V^T (rotates attention outputs back), R_K^T (the
  // chunked prefill's stored rows back); identity where a layer has none.
  const int64_t d = c.head_dim, dd = d * d;
  // A codec without rotations (bf16) may still list one empty matrix per layer: that is none.
  auto any_rotation = [](const std::vector<std::vector<float>>& list) {
    return std::any_of(list.begin(), list.end(), [](const auto& r) { return !r.empty(); });
  };
  has_rotation_ = any_rotation(tiers.rotations.k) || any_rotation(tiers.rotations.v);
  if (has_rotation_) {
    std::vector<float> host(static_cast<size_t>(c.num_layers) * kRotationsPerLayer * dd, 0.0f);
    for (int l = 0; l < c.num_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const auto& list = kv == 0 ? tiers.rotations.k : tiers.rotations.v;
        float* dst = host.data() + (static_cast<int64_t>(l) * kRotationsPerLayer + kv) * dd;
        if (!list.empty() && !list[l].empty()) {
          if (static_cast<int64_t>(list[l].size()) != dd) {
            return absl::InvalidArgumentError("rotation matrix of the wrong size");
          }
          std::copy(list[l].begin(), list[l].end(), dst);
        } else {
          for (int64_t i = 0; i < d; ++i) dst[i * d + i] = 1.0f;
        }
      }
      float* base = host.data() + static_cast<int64_t>(l) * kRotationsPerLayer * dd;
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j) {
          base[2 * dd + i * d + j] = base[dd + j * d + i];  // R_V^T
          base[3 * dd + i * d + j] = base[j * d + i];       // R_K^T
        }
      }
    }
    OSCARKV_RETURN_IF_ERROR(rotations_.Allocate(host.size() * 4, "rotations"));
    OSCARKV_CUDA_OK(cudaMemcpy(rotations_.get(), host.data(), host.size() * 4,
                               cudaMemcpyHostToDevice));
  }

  const KvPageTableConfig& pc = pages_.config();
  OSCARKV_RETURN_IF_ERROR(bf16_pool_.Allocate(
      static_cast<size_t>(pc.bf16_pages) * Bf16PageBytes(pc), "BF16 KV pages"));
  OSCARKV_RETURN_IF_ERROR(int2_pool_.Allocate(
      static_cast<size_t>(pc.int2_pages) * Int2PageBytes(pc), "INT2 KV pages"));

  const int64_t rows = std::max<int64_t>(options_.max_prompt_tokens, options_.max_batch);
  const int64_t dm = c.d_model, qdim = int64_t{c.num_heads} * d;
  const int64_t kvdim = int64_t{c.num_kv_heads} * d, qkvdim = qdim + 2 * kvdim;
  const int64_t chunk = std::min<int64_t>(rows, std::max(options_.ffn_chunk_tokens,
                                                         options_.max_batch));
  OSCARKV_RETURN_IF_ERROR(x_.Allocate(rows * dm * 4, "activations"));
  OSCARKV_RETURN_IF_ERROR(h_.Allocate(rows * dm * 2, "activations"));
  OSCARKV_RETURN_IF_ERROR(qkv_.Allocate(rows * qkvdim * 4, "QKV"));
  OSCARKV_RETURN_IF_ERROR(attn_bf16_.Allocate(rows * qdim * 2, "attention output"));
  if (options_.hopper_prefill_attention) {
    k::PrefillAttentionParams longest;  // a prompt of `rows` keys, one pass or chunked
    longest.num_tokens = rows;
    longest.num_kv_heads = c.num_kv_heads;
    longest.head_dim = d;
    OSCARKV_RETURN_IF_ERROR(prefill_attn_workspace_.Allocate(
        static_cast<size_t>(k::PrefillAttentionWorkspaceBytes(longest)), "prefill attention"));
  }
  // Rotated rows; without a rotation, packed copies of K/V rows (demotion input, TailRows).
  OSCARKV_RETURN_IF_ERROR(k_rot_.Allocate(rows * kvdim * 4, "rotated K"));
  OSCARKV_RETURN_IF_ERROR(v_rot_.Allocate(rows * kvdim * 4, "rotated V"));
  if (has_rotation_ || windowed_) {
    // Demotion input: a prefill's history, or 8 rows of each sequence in a decode step.
    const int64_t demote_rows = std::max<int64_t>(rows, int64_t{kPageTokens} * options_.max_batch);
    OSCARKV_RETURN_IF_ERROR(kv_tmp_bf16_.Allocate(demote_rows * kvdim * 2, "demotion input"));
  }
  OSCARKV_RETURN_IF_ERROR(gate_up_.Allocate(chunk * 2 * c.d_ff * 4, "FFN"));
  OSCARKV_RETURN_IF_ERROR(act_bf16_.Allocate(chunk * c.d_ff * 2, "FFN"));
  const int64_t b = options_.max_batch;
  OSCARKV_RETURN_IF_ERROR(q_rot_.Allocate(b * qdim * 4, "decode query"));
  OSCARKV_RETURN_IF_ERROR(attn_out_.Allocate(b * qdim * 4, "decode attention"));
  OSCARKV_RETURN_IF_ERROR(logits_.Allocate(b * int64_t{c.vocab_size} * 4, "logits"));
  OSCARKV_RETURN_IF_ERROR(argmax_.Allocate(b * 4, "argmax"));
  LOG(INFO) << "GPU model: weights " << (weights_.device_bytes() >> 20) << " MiB, KV pools "
            << (kv_pool_bytes() >> 20) << " MiB (" << pc.bf16_pages << " BF16 + "
            << pc.int2_pages << " INT2 pages, budget " << (pc.budget_bytes >> 20) << " MiB)";
  return absl::OkStatus();
}

absl::Status GpuModel::Gemm(const uint16_t* x, const uint16_t* w, int64_t rows, int64_t in,
                            int64_t out, float beta, float* y) {
  const float alpha = 1.0f;
  // Row-major y[rows, out] = x[rows, in] W[out, in]^T is column-major y^T = W^T(op T) x^T.
  OSCARKV_CUBLAS_OK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                 static_cast<int>(rows), static_cast<int>(in), &alpha, w,
                                 CUDA_R_16BF, static_cast<int>(in), x, CUDA_R_16BF,
                                 static_cast<int>(in), &beta, y, CUDA_R_32F,
                                 static_cast<int>(out), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status GpuModel::Rotate(const float* in, int64_t in_token_stride, int64_t tokens, int heads,
                              const float* r, float* out) {
  OSCARKV_CUDA_OK(k::RotateRowsCuda(
      RotateJob(in, in_token_stride, tokens, heads, config_.head_dim, r, out), stream_));
  return absl::OkStatus();
}

absl::Status GpuModel::UploadMeta(const std::vector<int32_t>& host) {
  const size_t bytes = host.size() * 4;
  if (meta_.bytes() < bytes) {
    OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
    OSCARKV_RETURN_IF_ERROR(meta_.Allocate(std::max<size_t>(bytes * 2, 1 << 16), "step metadata"));
  }
  // Pageable copy: returns once the source is consumed, so `host` may change afterwards.
  OSCARKV_CUDA_OK(cudaMemcpyAsync(meta_.get(), host.data(), bytes, cudaMemcpyHostToDevice,
                                  stream_));
  return absl::OkStatus();
}

const float* GpuModel::RotationOf(int layer, int which) const {
  if (!has_rotation_) return nullptr;
  const int64_t dd = int64_t{config_.head_dim} * config_.head_dim;
  return rotations_.as<float>() + (int64_t{layer} * kRotationsPerLayer + which) * dd;
}

absl::Status GpuModel::LayerQkv(int l, int64_t rows, const int32_t* positions,
                                const k::QkvRotatedOut* rotated, const k::QkvPageWrite* pages) {
  const model::ModelConfig& c = config_;
  const int d = c.head_dim, hq = c.num_heads, hkv = c.num_kv_heads;
  const int64_t dm = c.d_model, qdim = int64_t{hq} * d, kvdim = int64_t{hkv} * d;
  const int64_t qkvdim = qdim + 2 * kvdim;
  const float eps = static_cast<float>(c.norm_eps);
  const GpuLayerWeights& w = weights_.layer(l);
  float* x = x_.as<float>();
  uint16_t* h = h_.as<uint16_t>();
  float* qkv = qkv_.as<float>();
  OSCARKV_CUDA_OK(k::RmsNormToBf16Cuda(x, w.attn_norm, rows, static_cast<int>(dm), eps, h,
                                       stream_));
  OSCARKV_RETURN_IF_ERROR(Gemm(h, w.wqkv, rows, dm, qkvdim, 0.0f, qkv));
  k::QkvPostParams post;
  post.q = qkv;
  post.k = qkv + qdim;
  post.v = qkv + qdim + kvdim;
  post.q_row_stride = post.k_row_stride = post.v_row_stride = qkvdim;
  post.rows = rows;
  post.num_q_heads = hq;
  post.num_kv_heads = hkv;
  post.head_dim = d;
  post.rope_dim = c.rope_dim;
  post.positions = positions;
  if (w.bqkv != nullptr) {
    post.bq = w.bqkv;
    post.bk = w.bqkv + qdim;
    post.bv = w.bqkv + qdim + kvdim;
  }
  post.q_norm = w.q_norm;
  post.k_norm = w.k_norm;
  post.eps = eps;
  post.rope_theta = c.rope_theta;
  post.rope_scale = c.rope_scale;
  post.freq_div = weights_.rope_freqs();
  post.pairing = c.rope_style == model::RopeStyle::kNeox ? k::RopePairing::kNeox
                                                         : k::RopePairing::kAdjacentPairs;
  if (rotated != nullptr) {
    k::QkvRotatedOut out = *rotated;
    if (pages != nullptr) out.pages = *pages;
    OSCARKV_CUDA_OK(k::QkvPostCuda(post, out, stream_));
  } else if (pages != nullptr) {
    OSCARKV_CUDA_OK(k::QkvPostCuda(post, *pages, stream_));
  } else {
    OSCARKV_CUDA_OK(k::QkvPostCuda(post, stream_));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::LayerOutputAndFfn(int l, int64_t rows) {
  const model::ModelConfig& c = config_;
  const int64_t dm = c.d_model, qdim = int64_t{c.num_heads} * c.head_dim, dff = c.d_ff;
  const float eps = static_cast<float>(c.norm_eps);
  const GpuLayerWeights& w = weights_.layer(l);
  float* x = x_.as<float>();
  uint16_t* h = h_.as<uint16_t>();
  const uint16_t* attn_bf16 = attn_bf16_.as<uint16_t>();
  const int64_t chunk = std::max<int64_t>(options_.ffn_chunk_tokens, options_.max_batch);
  OSCARKV_RETURN_IF_ERROR(Gemm(attn_bf16, w.wo, rows, qdim, dm, 1.0f, x));

  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    OSCARKV_CUDA_OK(k::RmsNormToBf16Cuda(x + r0 * dm, w.ffn_norm, n, static_cast<int>(dm), eps,
                                         h + r0 * dm, stream_));
    OSCARKV_RETURN_IF_ERROR(Gemm(h + r0 * dm, w.w_gate_up, n, dm, 2 * dff, 0.0f,
                                 gate_up_.as<float>()));
    OSCARKV_CUDA_OK(k::SiluMulToBf16Cuda(gate_up_.as<float>(), n, static_cast<int>(dff),
                                         act_bf16_.as<uint16_t>(), stream_));
    OSCARKV_RETURN_IF_ERROR(Gemm(act_bf16_.as<uint16_t>(), w.w_down, n, dff, dm, 1.0f,
                                 x + r0 * dm));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::RunLayers(int64_t rows, bool prefill, const StepMeta& meta) {
  const model::ModelConfig& c = config_;
  const int d = c.head_dim, hq = c.num_heads, hkv = c.num_kv_heads;
  const int64_t qdim = int64_t{hq} * d, kvdim = int64_t{hkv} * d;
  const int64_t qkvdim = qdim + 2 * kvdim;
  const KvPageTableConfig& pc = pages_.config();
  const int64_t bf16_unit = k::Bf16PageUnitBytes(d), int2_unit = k::Int2PageUnitBytes(d);
  const int64_t bf16_layer_bytes = int64_t{pc.bf16_pages} * hkv * bf16_unit;
  const int64_t int2_layer_bytes = int64_t{pc.int2_pages} * hkv * int2_unit;
  float* qkv = qkv_.as<float>();

  for (int l = 0; l < c.num_layers; ++l) {
    uint8_t* bf16_pool = bf16_pool_.as<uint8_t>() + l * bf16_layer_bytes;
    uint8_t* int2_pool = int2_pool_.as<uint8_t>() + l * int2_layer_bytes;
    const float* r_k = RotationOf(l, 0);
    const float* r_v = RotationOf(l, 1);
    const float* r_v_t = RotationOf(l, 2);

    // Cache rows in the tier basis (rotated by R_K / R_V), f32; rounded to bf16 when stored. A
    // decode step rotates q, K and V in the QKV post-processing's launch; a prefill's K and V
    // (many rows) in one RotateRowsCuda launch, which shares R over 8 rows a block. A decode
    // step whose BF16 page rows are one range of all its rows (every decode step) also writes
    // them in the QKV post-processing's launch (one launch fewer), rotated or not.
    k::QkvPageWrite pages;
    if (!prefill && meta.writes.size() == 1 && meta.writes[0].row_begin == 0 &&
        meta.writes[0].count == rows) {
      const int64_t at = meta.writes[0].meta_index;
      pages = {.pool = bf16_pool, .page_ids = meta.bf16_page + at,
               .rows_in_page = meta.bf16_row + at, .page_stride_bytes = hkv * bf16_unit,
               .head_stride_bytes = bf16_unit, .k_segment_offset_bytes = k::Bf16PageKOffset(d),
               .v_segment_offset_bytes = k::Bf16PageVOffset(d)};
    }
    k::QkvRotatedOut rotated;
    if (has_rotation_ && !prefill) {
      rotated = {.qk_rotation = r_k, .v_rotation = r_v, .q = q_rot_.as<float>(),
                 .k = k_rot_.as<float>(), .v = v_rot_.as<float>()};
    }
    OSCARKV_RETURN_IF_ERROR(LayerQkv(l, rows, meta.positions,
                                     has_rotation_ && !prefill ? &rotated : nullptr, &pages));

    if (prefill) OSCARKV_CUDA_OK(cudaEventRecord(cache_events_[2 * l], stream_));
    const float* k_rows = qkv + qdim;
    const float* v_rows = qkv + qdim + kvdim;
    int64_t kv_stride = qkvdim;
    if (has_rotation_) {
      if (prefill) {  // K and V in one launch
        const k::RotateRowsParams kv_jobs[2] = {
            RotateJob(k_rows, qkvdim, rows, hkv, d, r_k, k_rot_.as<float>()),
            RotateJob(v_rows, qkvdim, rows, hkv, d, r_v, v_rot_.as<float>())};
        OSCARKV_CUDA_OK(k::RotateRowsCuda(kv_jobs, 2, stream_));
      }
      k_rows = k_rot_.as<float>();
      v_rows = v_rot_.as<float>();
      kv_stride = kvdim;
    }
    if (meta.tail_out != nullptr) {
      const int64_t tail_tokens = rows - meta.tail_begin;
      for (int kv = 0; kv < 2; ++kv) {
        const float* src = (kv == 0 ? k_rows : v_rows) + meta.tail_begin * kv_stride;
        uint16_t* dst = meta.tail_out + (int64_t{l} * 2 + kv) * tail_tokens * kvdim;
        if (kv_stride != kvdim) {  // unrotated rows in the strided QKV buffer: pack them first
          float* packed = (kv == 0 ? k_rot_ : v_rot_).as<float>();
          OSCARKV_CUDA_OK(cudaMemcpy2DAsync(packed, kvdim * 4, src, kv_stride * 4, kvdim * 4,
                                            tail_tokens, cudaMemcpyDeviceToDevice, stream_));
          src = packed;
        }
        OSCARKV_CUDA_OK(k::F32ToBf16Cuda(src, tail_tokens * kvdim, dst, stream_));
      }
    }
    const std::vector<StepMeta::WriteRange> no_writes;  // the QKV post-processing wrote them
    for (const StepMeta::WriteRange& wr :
         pages.pool != nullptr ? no_writes : meta.writes) {
      k::PageRowsParams kv_writes[2];  // K and V rows in one launch
      for (int kv = 0; kv < 2; ++kv) {
        k::PageRowsParams& pr = kv_writes[kv];
        pr.rows = (kv == 0 ? k_rows : v_rows) + wr.row_begin * kv_stride;
        pr.row_stride = kv_stride;
        pr.tokens = wr.count;
        pr.heads = hkv;
        pr.head_dim = d;
        pr.page_ids = meta.bf16_page + wr.meta_index;
        pr.rows_in_page = meta.bf16_row + wr.meta_index;
        pr.pool = bf16_pool;
        pr.page_stride_bytes = hkv * bf16_unit;
        pr.head_stride_bytes = bf16_unit;
        pr.segment_offset_bytes = kv == 0 ? k::Bf16PageKOffset(d) : k::Bf16PageVOffset(d);
      }
      OSCARKV_CUDA_OK(k::WriteBf16PageRowsCuda(kv_writes, 2, stream_));
    }
    // INT2 history: from bf16-rounded rotated rows, as the CPU cache quantises.
    const int64_t demote_tokens =
        prefill ? meta.num_hist_pages * kPageTokens : meta.num_demote * kPageTokens;
    if (demote_tokens > 0) {
      for (int kv = 0; kv < 2; ++kv) {
        uint16_t* tmp = kv_tmp_bf16_.as<uint16_t>();
        if (prefill) {
          const float* src = (kv == 0 ? k_rows : v_rows) + meta.hist_begin * kv_stride;
          if (kv_stride == kvdim) {
            OSCARKV_CUDA_OK(k::F32ToBf16Cuda(src, demote_tokens * kvdim, tmp, stream_));
          } else {
            // Unrotated rows still live in the strided QKV buffer: pack them first.
            float* packed = (kv == 0 ? k_rot_ : v_rot_).as<float>();
            OSCARKV_CUDA_OK(cudaMemcpy2DAsync(packed, kvdim * 4, src, kv_stride * 4, kvdim * 4,
                                              demote_tokens, cudaMemcpyDeviceToDevice, stream_));
            OSCARKV_CUDA_OK(k::F32ToBf16Cuda(packed, demote_tokens * kvdim, tmp, stream_));
          }
        } else {
          k::PageGatherParams g;
          g.pool = bf16_pool;
          g.page_ids = meta.demote_src;
          g.num_pages = meta.num_demote;
          g.heads = hkv;
          g.head_dim = d;
          g.page_stride_bytes = hkv * bf16_unit;
          g.head_stride_bytes = bf16_unit;
          g.segment_offset_bytes = kv == 0 ? k::Bf16PageKOffset(d) : k::Bf16PageVOffset(d);
          g.out_bf16 = tmp;
          OSCARKV_CUDA_OK(k::GatherBf16PageRowsCuda(g, stream_));
        }
        k::KvQuantParams qp;
        qp.input_bf16 = tmp;
        qp.tokens = static_cast<int>(demote_tokens);
        qp.heads = hkv;
        qp.head_dim = d;
        qp.kind = kvformat::SegmentKind::kInt2PerToken;
        qp.clip_ratio = kv == 0 ? k_clip_ : v_clip_;
        k::DemotePagesTarget target;
        target.pool = int2_pool;
        target.page_ids = prefill ? meta.hist_pages : meta.demote_dst;
        target.page_stride_bytes = hkv * int2_unit;
        target.head_stride_bytes = int2_unit;
        target.segment_offset_bytes =
            kv == 0 ? k::Int2PageKCodesOffset(d) : k::Int2PageVCodesOffset(d);
        OSCARKV_CUDA_OK(k::DemoteToPagesCuda(qp, target, stream_));
      }
    }
    if (prefill) OSCARKV_CUDA_OK(cudaEventRecord(cache_events_[2 * l + 1], stream_));

    uint16_t* attn_bf16 = attn_bf16_.as<uint16_t>();
    if (prefill) {
      k::PrefillAttentionParams pa;
      pa.q = qkv;
      pa.k = qkv + qdim;
      pa.v = qkv + qdim + kvdim;
      pa.q_row_stride = pa.k_row_stride = pa.v_row_stride = qkvdim;
      pa.num_tokens = rows;
      pa.num_q_heads = hq;
      pa.num_kv_heads = hkv;
      pa.head_dim = d;
      pa.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
      pa.out_bf16 = attn_bf16;
      pa.workspace = prefill_attn_workspace_.get();
      pa.workspace_bytes = static_cast<int64_t>(prefill_attn_workspace_.bytes());
      OSCARKV_CUDA_OK(k::PrefillAttentionCuda(pa, stream_));
    } else {
      // q in the tier basis (rotated with K and V above) or as it is.
      const float* q = has_rotation_ ? q_rot_.as<float>() : qkv;
      const int64_t q_stride = has_rotation_ ? qdim : qkvdim;
      k::DecodeAttentionParams ap;
      ap.num_seqs = static_cast<int>(rows);
      ap.num_q_heads = hq;
      ap.num_kv_heads = hkv;
      ap.head_dim = d;
      ap.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
      ap.q = q;
      ap.q_seq_stride = q_stride;
      ap.bf16.page_indptr = meta.bf16_indptr;
      ap.bf16.page_indices = meta.bf16_indices;
      ap.bf16.seq_tokens = meta.bf16_tokens;
      ap.bf16.pool = bf16_pool;
      ap.bf16.page_stride_bytes = hkv * bf16_unit;
      ap.bf16.head_stride_bytes = bf16_unit;
      if (windowed_) {
        ap.int2.page_indptr = meta.int2_indptr;
        ap.int2.page_indices = meta.int2_indices;
        ap.int2.seq_tokens = meta.int2_tokens;
        ap.int2.pool = int2_pool;
        ap.int2.page_stride_bytes = hkv * int2_unit;
        ap.int2.head_stride_bytes = int2_unit;
      }
      ap.work = meta.work;
      ap.seq_work_indptr = meta.seq_work_indptr;
      ap.num_work = meta.num_work;
      ap.partial_out = partial_out_.as<float>();
      ap.partial_lse = partial_lse_.as<float>();
      ap.merge_counters = merge_counters_.as<int32_t>();
      ap.out = attn_out_.as<float>();
      ap.out_seq_stride = qdim;
      ap.one_split_per_seq = meta.one_split_per_seq;
      // The kernel just before (a page write, the QKV post-processing that writes the pages, or
      // a demotion) writes the tiers, which stage 1 only asks L2 for before its wait, and none
      // of the plan and page tables it reads there.
      ap.overlap_prior_kernel = true;
      OSCARKV_CUDA_OK(k::DecodeAttentionCuda(ap, stream_));
      if (has_rotation_) {  // back by R_V^T, rounded to bf16 for W_o on the way out
        k::RotateRowsParams back =
            RotateJob(attn_out_.as<float>(), qdim, rows, hq, d, r_v_t, nullptr);
        back.out_bf16 = attn_bf16;
        OSCARKV_CUDA_OK(k::RotateRowsCuda(back, stream_));
      } else {
        OSCARKV_CUDA_OK(k::F32ToBf16Cuda(attn_out_.as<float>(), rows * qdim, attn_bf16, stream_));
      }
    }
    OSCARKV_RETURN_IF_ERROR(LayerOutputAndFfn(l, rows));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::LogitsKernels(int64_t n, const float* x_rows, bool argmax, float* out) {
  const model::ModelConfig& c = config_;
  if (out == nullptr) out = logits_.as<float>();
  OSCARKV_CUDA_OK(k::RmsNormToBf16Cuda(x_rows, weights_.output_norm(), n, c.d_model,
                                       static_cast<float>(c.norm_eps), h_.as<uint16_t>(), stream_));
  OSCARKV_RETURN_IF_ERROR(
      Gemm(h_.as<uint16_t>(), weights_.output(), n, c.d_model, c.vocab_size, 0.0f, out));
  if (argmax) {
    OSCARKV_CUDA_OK(k::ArgmaxRowsCuda(out, static_cast<int>(n),
                                      static_cast<int>(c.vocab_size), argmax_.as<int32_t>(),
                                      stream_));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::Logits(int64_t rows, const float* x_rows, std::vector<float>* logits_out,
                              int32_t* argmax_out) {
  const model::ModelConfig& c = config_;
  const int64_t vocab = c.vocab_size;
  for (int64_t r0 = 0; r0 < rows; r0 += options_.max_batch) {
    const int64_t n = std::min<int64_t>(options_.max_batch, rows - r0);
    OSCARKV_RETURN_IF_ERROR(LogitsKernels(n, x_rows + r0 * c.d_model, argmax_out != nullptr));
    if (argmax_out != nullptr) {
      OSCARKV_CUDA_OK(cudaMemcpyAsync(argmax_out + r0, argmax_.get(), n * 4,
                                      cudaMemcpyDeviceToHost, stream_));
    }
    if (logits_out != nullptr) {
      OSCARKV_CUDA_OK(cudaMemcpyAsync(logits_out->data() + r0 * vocab, logits_.get(),
                                      n * vocab * 4, cudaMemcpyDeviceToHost, stream_));
    }
    OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::ScoreRows(const float* x_rows, std::span<const int32_t> tokens, int top_n,
                                 std::vector<engine::TokenLogprobs>* out) {
  const int64_t vocab = config_.vocab_size;
  top_n = static_cast<int>(std::min<int64_t>(top_n, vocab));
  // Rows per lm-head product: a prefill chunk's worth (not max_batch, often 1 on a prefill
  // worker), within the activation scratch's rows.
  const int64_t batch = std::min<int64_t>(
      kScoreRows, std::max<int64_t>(options_.max_prompt_tokens, options_.max_batch));
  if (score_logits_.bytes() < static_cast<size_t>(batch * vocab * 4)) {
    OSCARKV_RETURN_IF_ERROR(score_logits_.Allocate(batch * vocab * 4, "prompt scoring logits"));
  }
  // Per row: the token, its logprob and rank, then top_n ids and top_n logprobs (4 bytes each).
  const size_t bytes = static_cast<size_t>(batch) * (3 + 2 * engine::kMaxTopLogprobs) * 4;
  if (score_.bytes() < bytes) OSCARKV_RETURN_IF_ERROR(score_.Allocate(bytes, "prompt scores"));
  int32_t* d_tokens = score_.as<int32_t>();
  float* d_logprob = reinterpret_cast<float*>(d_tokens + batch);
  int32_t* d_rank = d_tokens + 2 * batch;
  int32_t* d_top_ids = d_tokens + 3 * batch;
  float* d_top_lp = reinterpret_cast<float*>(d_top_ids + batch * top_n);
  std::vector<float> logprob(batch), top_lp(batch * top_n);
  std::vector<int32_t> rank(batch), top_ids(batch * top_n);
  const int64_t rows = static_cast<int64_t>(tokens.size());
  for (int64_t r0 = 0; r0 < rows; r0 += batch) {
    const int64_t n = std::min(batch, rows - r0);
    OSCARKV_RETURN_IF_ERROR(
        LogitsKernels(n, x_rows + r0 * config_.d_model, false, score_logits_.as<float>()));
    OSCARKV_CUDA_OK(cudaMemcpyAsync(d_tokens, tokens.data() + r0, n * 4, cudaMemcpyHostToDevice,
                                    stream_));
    OSCARKV_CUDA_OK(k::TokenLogprobsRowsCuda(score_logits_.as<float>(), static_cast<int>(n),
                                             static_cast<int>(vocab), d_tokens, top_n, d_logprob,
                                             d_rank, d_top_ids, d_top_lp, stream_));
    OSCARKV_CUDA_OK(
        cudaMemcpyAsync(logprob.data(), d_logprob, n * 4, cudaMemcpyDeviceToHost, stream_));
    OSCARKV_CUDA_OK(
        cudaMemcpyAsync(rank.data(), d_rank, n * 4, cudaMemcpyDeviceToHost, stream_));
    if (top_n > 0) {
      OSCARKV_CUDA_OK(cudaMemcpyAsync(top_ids.data(), d_top_ids, n * top_n * 4,
                                      cudaMemcpyDeviceToHost, stream_));
      OSCARKV_CUDA_OK(cudaMemcpyAsync(top_lp.data(), d_top_lp, n * top_n * 4,
                                      cudaMemcpyDeviceToHost, stream_));
    }
    OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
    for (int64_t r = 0; r < n; ++r) {
      engine::TokenLogprobs& s = out->emplace_back();
      s.token = tokens[r0 + r];
      s.logprob = logprob[r];
      s.rank = rank[r];
      s.top.reserve(top_n);
      for (int j = 0; j < top_n; ++j) {
        s.top.emplace_back(top_ids[r * top_n + j], top_lp[r * top_n + j]);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GpuModel::ReserveDecodeMeta(int64_t work_items) {
  if (decode_meta_layout_.total > 0 && work_items <= decode_meta_layout_.work_items) {
    return absl::OkStatus();
  }
  OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
  decode_graphs_.Clear();  // they point into the old buffer
  DecodeMetaLayout lay;
  lay.small = (int64_t{options_.max_batch} + 1 + 3) / 4 * 4;  // work items 16-byte aligned
  lay.work = DecodeMetaLayout::kNumSmall * lay.small;
  lay.work_items = std::max<int64_t>(2 * work_items, 4 * int64_t{num_sms_});
  lay.bf16_indices = lay.work + 4 * lay.work_items;
  lay.int2_indices = lay.bf16_indices + pages_.config().bf16_pages;
  lay.total = lay.int2_indices + pages_.config().int2_pages;
  decode_meta_layout_ = {};  // until the buffer exists
  OSCARKV_RETURN_IF_ERROR(
      decode_meta_.Allocate(static_cast<size_t>(lay.total) * 4, "decode step metadata"));
  decode_meta_host_.assign(static_cast<size_t>(lay.total), 0);
  decode_meta_layout_ = lay;
  return absl::OkStatus();
}

absl::Status GpuModel::CheckPrompt(std::span<const int32_t> prompt) const {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) return absl::InvalidArgumentError("empty prompt");
  if (n > options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", n, " tokens is longer than the ",
                                                   "GPU model's max_prompt_tokens (",
                                                   options_.max_prompt_tokens, ")"));
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", t, " outside vocab of ", config_.vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuModel>> GpuModel::ForEngine(const engine::ServingEngine& engine,
                                                              const GpuModelOptions& options) {
  const model::ModelConfig& config = engine.model().config();
  OSCARKV_CUDA_OK(cudaSetDevice(options.device));
  OSCARKV_ASSIGN_OR_RETURN(GpuWeights weights,
                           GpuWeights::Upload(config, engine.model().weights()));
  return Create(config, std::move(weights), engine.tier_config(), options);
}

absl::Status GpuModel::AddSequence(int64_t id, std::span<const int32_t> prompt,
                                   int64_t max_total_tokens, int32_t* next_greedy,
                                   std::vector<float>* last_logits,
                                   std::vector<float>* all_logits, TailRows* tail) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(prompt.size());
  OSCARKV_RETURN_IF_ERROR(CheckPrompt(prompt));
  const int64_t kvdim = int64_t{config_.num_kv_heads} * config_.head_dim;
  const int64_t tail_bytes =
      tail == nullptr ? 0 : int64_t{config_.num_layers} * 2 * (n - tail->begin) * kvdim * 2;
  if (tail != nullptr) {
    if (tail->begin < 0 || tail->begin >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tail rows from ", tail->begin, " of a ", n, "-token prompt"));
    }
    if (static_cast<int64_t>(tail_.bytes()) < tail_bytes) {
      OSCARKV_RETURN_IF_ERROR(tail_.Allocate(tail_bytes, "prefill tail rows"));
    }
  }
  OSCARKV_RETURN_IF_ERROR(pages_.Admit(id, std::max(max_total_tokens, n)));
  absl::StatusOr<AppendPlan> plan = pages_.Append(id, n);
  if (!plan.ok()) {
    pages_.Remove(id);
    return plan.status();
  }
  // Metadata: tokens, positions, BF16 rows (two ranges: sink, recent), history pages.
  meta_host_.clear();
  const int64_t off_tokens = Push(meta_host_, prompt);
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  const int64_t off_pos = Push(meta_host_, pos);
  const int64_t off_page = Push(meta_host_, plan->bf16_page);
  const int64_t off_row = Push(meta_host_, plan->bf16_row);
  const int64_t off_hist = Push(meta_host_, plan->hist_pages);
  StepMeta meta;
  // token_index is increasing: split it into runs of consecutive rows.
  for (size_t i = 0; i < plan->token_index.size();) {
    size_t j = i + 1;
    while (j < plan->token_index.size() && plan->token_index[j] == plan->token_index[j - 1] + 1) {
      ++j;
    }
    meta.writes.push_back({plan->token_index[i], static_cast<int64_t>(j - i),
                           static_cast<int64_t>(i)});
    i = j;
  }
  meta.hist_begin = plan->hist_begin;
  meta.num_hist_pages = static_cast<int64_t>(plan->hist_pages.size());
  if (tail != nullptr) {
    meta.tail_begin = tail->begin;
    meta.tail_out = tail_.as<uint16_t>();
  }
  absl::Status st = UploadMeta(meta_host_);
  if (st.ok()) {
    const int32_t* base = meta_.as<int32_t>();
    meta.tokens = base + off_tokens;
    meta.positions = base + off_pos;
    meta.bf16_page = base + off_page;
    meta.bf16_row = base + off_row;
    meta.hist_pages = base + off_hist;
    st = CudaStatus(k::EmbedRowsCuda(weights_.token_embd(), meta.tokens, n, config_.d_model,
                                     x_.as<float>(), stream_),
                    "embedding");
  }
  if (st.ok()) st = RunLayers(n, /*prefill=*/true, meta);
  if (st.ok() && all_logits != nullptr) {
    all_logits->resize(n * config_.vocab_size);
    std::vector<int32_t> argmax(n);
    st = Logits(n, x_.as<float>(), all_logits, argmax.data());
    if (st.ok() && next_greedy != nullptr) *next_greedy = argmax.back();
  }
  if (st.ok() && (all_logits == nullptr || last_logits != nullptr)) {
    if (last_logits != nullptr) last_logits->resize(config_.vocab_size);
    int32_t arg = 0;
    st = Logits(1, x_.as<float>() + (n - 1) * config_.d_model, last_logits, &arg);
    if (st.ok() && next_greedy != nullptr) *next_greedy = arg;
  }
  if (st.ok()) st = CudaStatus(cudaStreamSynchronize(stream_), "prefill");
  if (st.ok() && tail != nullptr) {
    tail->bits.resize(static_cast<size_t>(tail_bytes / 2));
    st = CudaStatus(cudaMemcpy(tail->bits.data(), tail_.get(), tail_bytes, cudaMemcpyDeviceToHost),
                    "copying the tail rows");
  }
  if (!st.ok()) {
    pages_.Remove(id);
    return st;
  }
  last_prefill_.forward_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  last_prefill_.cache_write_seconds = 0;
  for (int l = 0; l < config_.num_layers; ++l) {
    float ms = 0;
    OSCARKV_CUDA_OK(cudaEventElapsedTime(&ms, cache_events_[2 * l], cache_events_[2 * l + 1]));
    last_prefill_.cache_write_seconds += ms * 1e-3;
  }
  return absl::OkStatus();
}

PackedKvLayout GpuModel::PackedLayout(int64_t length) const {
  return PackedLayoutFor(pages_.config(), length);
}

absl::Status GpuModel::CopyPackedPages(int64_t id, std::byte* packed, bool pack) {
  const SeqPages& s = pages_.seq(id);
  const PackedKvLayout layout = PackedLayout(s.length);
  const KvPageTableConfig& pc = pages_.config();
  if (static_cast<int64_t>(s.bf16.size()) != layout.bf16_pages ||
      static_cast<int64_t>(s.int2.size()) != layout.int2_pages) {
    return absl::InternalError(absl::StrCat("sequence ", id, " holds ", s.bf16.size(), "+",
                                            s.int2.size(), " pages, its length implies ",
                                            layout.bf16_pages, "+", layout.int2_pages));
  }
  std::vector<int32_t> ids(s.bf16.begin(), s.bf16.end());
  ids.insert(ids.end(), s.int2.begin(), s.int2.end());
  OSCARKV_RETURN_IF_ERROR(UploadMeta(ids));
  k::PagePackParams p;
  p.layers = pc.num_layers;
  // BF16 pages first, then INT2 (PackedKvLayout).
  p.pool = bf16_pool_.as<uint8_t>();
  p.pool_pages = pc.bf16_pages;
  p.chunk_bytes = layout.bf16_chunk_bytes;
  p.pages = meta_.as<int32_t>();
  p.num_pages = layout.bf16_pages;
  p.packed = reinterpret_cast<uint8_t*>(packed);
  OSCARKV_CUDA_OK(pack ? k::PackPagesCuda(p, stream_) : k::UnpackPagesCuda(p, stream_));
  p.pool = int2_pool_.as<uint8_t>();
  p.pool_pages = pc.int2_pages;
  p.chunk_bytes = layout.int2_chunk_bytes;
  p.pages = meta_.as<int32_t>() + layout.bf16_pages;
  p.num_pages = layout.int2_pages;
  p.packed = reinterpret_cast<uint8_t*>(packed) + layout.bf16_bytes();
  OSCARKV_CUDA_OK(pack ? k::PackPagesCuda(p, stream_) : k::UnpackPagesCuda(p, stream_));
  return CudaStatus(cudaStreamSynchronize(stream_), pack ? "pack pages" : "unpack pages");
}

absl::Status GpuModel::PackSequence(int64_t id, std::span<std::byte> packed) {
  if (!pages_.Has(id)) return absl::NotFoundError(absl::StrCat("sequence ", id));
  const int64_t need = PackedLayout(pages_.seq(id).length).bytes();
  if (static_cast<int64_t>(packed.size()) < need) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed buffer of ", packed.size(), " bytes < ", need));
  }
  return CopyPackedPages(id, packed.data(), /*pack=*/true);
}

absl::Status GpuModel::AddPackedSequence(int64_t id, int64_t length, int64_t max_total_tokens,
                                         std::span<const std::byte> packed) {
  if (length <= 0) return absl::InvalidArgumentError("packed sequence of no tokens");
  const int64_t need = PackedLayout(length).bytes();
  if (static_cast<int64_t>(packed.size()) != need) {
    return absl::InvalidArgumentError(absl::StrCat("packed KV of ", packed.size(),
                                                   " bytes; a sequence of ", length,
                                                   " tokens packs to ", need));
  }
  OSCARKV_RETURN_IF_ERROR(pages_.Admit(id, std::max(max_total_tokens, length)));
  // The prefill plan of `length` tokens lays the pages out as any sequence of that length
  // (KvPageTable: tiers depend on the length only), so the packed pages map one to one.
  absl::Status st = pages_.Append(id, length).status();
  if (st.ok()) st = CopyPackedPages(id, const_cast<std::byte*>(packed.data()), /*pack=*/false);
  if (!st.ok()) pages_.Remove(id);
  return st;
}

absl::Status GpuModel::AddSyntheticSequence(int64_t id, int64_t length, int64_t max_total_tokens,
                                            uint64_t seed) {
  OSCARKV_RETURN_IF_ERROR(pages_.Admit(id, std::max(max_total_tokens, length)));
  absl::StatusOr<AppendPlan> plan = pages_.Append(id, length);
  if (!plan.ok()) {
    pages_.Remove(id);
    return plan.status();
  }
  // Random contents: the whole pools once (cheaper than page by page).
  if (pools_filled_) return absl::OkStatus();
  pools_filled_ = true;
  const KvPageTableConfig& pc = pages_.config();
  const int64_t bf16_elems = static_cast<int64_t>(bf16_pool_.bytes() / 2);
  OSCARKV_CUDA_OK(FillRandomBf16(bf16_pool_.as<uint16_t>(), bf16_elems, 1.0f, seed, stream_));
  const int64_t int2_units = int64_t{pc.int2_pages} * pc.num_kv_heads * pc.num_layers;
  OSCARKV_CUDA_OK(FillRandomInt2Units(int2_pool_.as<uint8_t>(), int2_units, pc.head_dim, seed + 1,
                                      stream_));
  OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status GpuModel::DecodeStep(std::span<const int64_t> ids, std::span<const int32_t> tokens,
                                  std::vector<int32_t>* next_greedy, std::vector<float>* logits) {
  const int64_t b = static_cast<int64_t>(ids.size());
  if (b == 0) return absl::OkStatus();
  if (b != static_cast<int64_t>(tokens.size())) {
    return absl::InvalidArgumentError("DecodeStep: ids and tokens differ in length");
  }
  if (b > options_.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode batch ", b, " > max_batch ", options_.max_batch));
  }
  for (int64_t i = 0; i < b; ++i) {
    if (!pages_.Has(ids[i])) return absl::NotFoundError(absl::StrCat("sequence ", ids[i]));
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i], " outside vocab"));
    }
  }
  // Check every sequence before appending to any, so a refused step changes nothing.
  for (int64_t i = 0; i < b; ++i) {
    const SeqPages& s = pages_.seq(ids[i]);
    const PageCount need = PagesForTokens(pages_.config(), s.length + 1);
    if (need.bf16 > s.reserved.bf16 || need.int2 > s.reserved.int2) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", ids[i], " reached the ",
                                                "length it was admitted for"));
    }
    for (int64_t j = 0; j < i; ++j) {
      if (ids[j] == ids[i]) return absl::InvalidArgumentError("DecodeStep: repeated sequence id");
    }
  }
  std::vector<int32_t> positions(b), page(b), row(b), demote_src, demote_dst;
  for (int64_t i = 0; i < b; ++i) {
    positions[i] = static_cast<int32_t>(pages_.seq(ids[i]).length);
    OSCARKV_ASSIGN_OR_RETURN(AppendPlan plan, pages_.Append(ids[i], 1));
    page[i] = plan.bf16_page[0];
    row[i] = plan.bf16_row[0];
    demote_src.insert(demote_src.end(), plan.demote_src.begin(), plan.demote_src.end());
    demote_dst.insert(demote_dst.end(), plan.demote_dst.begin(), plan.demote_dst.end());
  }
  // Tier tables after the append (and demotion) of this step.
  std::vector<int32_t> bf16_indptr{0}, bf16_indices, bf16_tokens(b), int2_indptr{0},
      int2_indices, int2_tokens(b);
  for (int64_t i = 0; i < b; ++i) {
    const SeqPages& s = pages_.seq(ids[i]);
    bf16_indices.insert(bf16_indices.end(), s.bf16.begin(), s.bf16.end());
    bf16_indptr.push_back(static_cast<int32_t>(bf16_indices.size()));
    bf16_tokens[i] = s.bf16_tokens;
    int2_indices.insert(int2_indices.end(), s.int2.begin(), s.int2.end());
    int2_indptr.push_back(static_cast<int32_t>(int2_indices.size()));
    int2_tokens[i] = s.int2_tokens;
  }
  const int32_t max_int2_tokens =
      windowed_ ? *std::max_element(int2_tokens.begin(), int2_tokens.end()) : 0;
  const k::DecodePlan plan = k::PlanDecodeAttention(
      k::GpuDecodePlanConfig(static_cast<int>(b), config_.num_kv_heads, config_.num_heads,
                             config_.head_dim, max_int2_tokens, num_sms_),
      static_cast<int>(b), bf16_tokens.data(), windowed_ ? int2_tokens.data() : nullptr);
  const int64_t need_out = plan.PartialOutFloats(config_.num_heads, config_.head_dim) * 4;
  if (static_cast<int64_t>(partial_out_.bytes()) < need_out) {
    OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
    decode_graphs_.Clear();  // they point into the old buffers
    OSCARKV_RETURN_IF_ERROR(partial_out_.Allocate(need_out * 2, "attention partials"));
    OSCARKV_RETURN_IF_ERROR(
        partial_lse_.Allocate(plan.PartialLseFloats(config_.num_heads) * 8, "attention partials"));
  }
  // Zero once; every attention call leaves them zero (DecodeAttentionParams::merge_counters).
  const int64_t need_counters = static_cast<int64_t>(b) * config_.num_heads * 4;
  if (static_cast<int64_t>(merge_counters_.bytes()) < need_counters) {
    OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
    decode_graphs_.Clear();
    OSCARKV_RETURN_IF_ERROR(
        merge_counters_.Allocate(need_counters * 2, "attention merge counters"));
    OSCARKV_CUDA_OK(cudaMemsetAsync(merge_counters_.get(), 0, merge_counters_.bytes(), stream_));
  }
  OSCARKV_RETURN_IF_ERROR(ReserveDecodeMeta(plan.num_work()));
  const DecodeMetaLayout& lay = decode_meta_layout_;
  std::vector<int32_t>& host = decode_meta_host_;
  auto put = [&](int64_t at, std::span<const int32_t> values) {
    std::copy(values.begin(), values.end(), host.begin() + at);
  };
  put(lay.At(DecodeMetaLayout::kTokens), tokens);
  put(lay.At(DecodeMetaLayout::kPositions), positions);
  put(lay.At(DecodeMetaLayout::kPage), page);
  put(lay.At(DecodeMetaLayout::kRow), row);
  put(lay.At(DecodeMetaLayout::kDemoteSrc), demote_src);
  put(lay.At(DecodeMetaLayout::kDemoteDst), demote_dst);
  put(lay.At(DecodeMetaLayout::kBf16Indptr), bf16_indptr);
  put(lay.At(DecodeMetaLayout::kBf16Tokens), bf16_tokens);
  put(lay.At(DecodeMetaLayout::kInt2Indptr), int2_indptr);
  put(lay.At(DecodeMetaLayout::kInt2Tokens), int2_tokens);
  put(lay.At(DecodeMetaLayout::kSeqWorkIndptr), plan.seq_work_indptr);
  static_assert(sizeof(k::DecodeWorkItem) == 16);
  for (int i = 0; i < plan.num_work(); ++i) {
    const k::DecodeWorkItem& wi = plan.work[i];
    put(lay.work + 4 * int64_t{i},
        std::array<int32_t, 4>{wi.seq, wi.tier, wi.token_begin, wi.token_end});
  }
  put(lay.bf16_indices, bf16_indices);
  put(lay.int2_indices, int2_indices);
  // Pageable copies: each returns once its source is consumed. The per-sequence arrays and the
  // work items are one range; the page lists sit at fixed offsets past them.
  int32_t* base = decode_meta_.as<int32_t>();
  const int64_t head_ints = lay.work + 4 * int64_t{plan.num_work()};
  OSCARKV_CUDA_OK(
      cudaMemcpyAsync(base, host.data(), head_ints * 4, cudaMemcpyHostToDevice, stream_));
  for (const auto& [at, count] : {std::pair{lay.bf16_indices, bf16_indices.size()},
                                  std::pair{lay.int2_indices, int2_indices.size()}}) {
    if (count == 0) continue;
    OSCARKV_CUDA_OK(
        cudaMemcpyAsync(base + at, host.data() + at, count * 4, cudaMemcpyHostToDevice, stream_));
  }
  StepMeta meta;
  meta.tokens = base + lay.At(DecodeMetaLayout::kTokens);
  meta.positions = base + lay.At(DecodeMetaLayout::kPositions);
  meta.writes.push_back({0, b, 0});
  meta.bf16_page = base + lay.At(DecodeMetaLayout::kPage);
  meta.bf16_row = base + lay.At(DecodeMetaLayout::kRow);
  meta.num_demote = static_cast<int64_t>(demote_src.size());
  meta.demote_src = base + lay.At(DecodeMetaLayout::kDemoteSrc);
  meta.demote_dst = base + lay.At(DecodeMetaLayout::kDemoteDst);
  meta.bf16_indptr = base + lay.At(DecodeMetaLayout::kBf16Indptr);
  meta.bf16_indices = base + lay.bf16_indices;
  meta.bf16_tokens = base + lay.At(DecodeMetaLayout::kBf16Tokens);
  meta.int2_indptr = base + lay.At(DecodeMetaLayout::kInt2Indptr);
  meta.int2_indices = base + lay.int2_indices;
  meta.int2_tokens = base + lay.At(DecodeMetaLayout::kInt2Tokens);
  meta.work = reinterpret_cast<const k::DecodeWorkItem*>(base + lay.work);
  meta.seq_work_indptr = base + lay.At(DecodeMetaLayout::kSeqWorkIndptr);
  meta.num_work = plan.num_work();
  meta.one_split_per_seq = plan.OneSplitPerSequence();

  // Everything from the embedding to the argmax. Its launches depend on the key alone: the
  // metadata sits at fixed offsets and every buffer it touches is allocated before this point.
  auto enqueue = [&]() -> absl::Status {
    OSCARKV_CUDA_OK(k::EmbedRowsCuda(weights_.token_embd(), meta.tokens, b, config_.d_model,
                                     x_.as<float>(), stream_));
    OSCARKV_RETURN_IF_ERROR(RunLayers(b, /*prefill=*/false, meta));
    return LogitsKernels(b, x_.as<float>(), /*argmax=*/true);
  };
  if (options_.decode_graphs) {
    const StepGraphCache::Key key = {b, meta.num_work, meta.num_demote, meta.one_split_per_seq};
    OSCARKV_RETURN_IF_ERROR(decode_graphs_.Run(key, stream_, enqueue));
  } else {
    OSCARKV_RETURN_IF_ERROR(enqueue());
  }
  next_greedy->resize(b);
  OSCARKV_CUDA_OK(
      cudaMemcpyAsync(next_greedy->data(), argmax_.get(), b * 4, cudaMemcpyDeviceToHost, stream_));
  if (logits != nullptr) {
    logits->resize(b * config_.vocab_size);
    OSCARKV_CUDA_OK(cudaMemcpyAsync(logits->data(), logits_.get(), logits->size() * 4,
                                    cudaMemcpyDeviceToHost, stream_));
  }
  OSCARKV_CUDA_OK(cudaStreamSynchronize(stream_));
  pages_.ReleaseDemoted();
  return absl::OkStatus();
}

}  // namespace oscarkv::model_gpu
