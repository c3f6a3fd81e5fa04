#include "lib/model_gpu/gpu_weights.h"

#include <cmath>
#include <functional>

#include "lib/base/status_macros.h"
#include "lib/kvformat/float16.h"
#include "lib/model_gpu/random_fill.h"

namespace oscarkv::model_gpu {
namespace {

// Offsets of every tensor inside the arena, computed before allocating it.
struct ArenaLayout {
  size_t bytes = 0;
  size_t Add(size_t n) {
    const size_t at = bytes;
    bytes += (n + 255) / 256 * 256;
    return at;
  }
};

struct LayerOffsets {
  size_t attn_norm, wqkv, bqkv, q_norm, k_norm, wo, ffn_norm, w_gate_up, w_down;
};

struct Offsets {
  size_t token_embd, output, output_norm, rope_freqs;
  std::vector<LayerOffsets> layers;
};

constexpr size_t kNone = ~size_t{0};

Offsets Plan(const model::ModelConfig& c, bool has_output, bool has_rope_freqs,
             ArenaLayout& arena) {
  const size_t dm = c.d_model, qkv = static_cast<size_t>(c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  const size_t qdim = static_cast<size_t>(c.num_heads) * c.head_dim, dff = c.d_ff;
  Offsets o;
  o.token_embd = arena.Add(size_t{2} * c.vocab_size * dm);
  o.output = has_output ? arena.Add(size_t{2} * c.vocab_size * dm) : o.token_embd;
  o.output_norm = arena.Add(4 * dm);
  o.rope_freqs = has_rope_freqs ? arena.Add(4 * static_cast<size_t>(c.rope_dim / 2)) : kNone;
  for (int l = 0; l < c.num_layers; ++l) {
    LayerOffsets lo;
    lo.attn_norm = arena.Add(4 * dm);
    lo.wqkv = arena.Add(2 * qkv * dm);
    lo.bqkv = c.qkv_bias ? arena.Add(4 * qkv) : kNone;
    lo.q_norm = c.qk_norm ? arena.Add(4 * static_cast<size_t>(c.head_dim)) : kNone;
    lo.k_norm = c.qk_norm ? arena.Add(4 * static_cast<size_t>(c.head_dim)) : kNone;
    lo.wo = arena.Add(2 * dm * qdim);
    lo.ffn_norm = arena.Add(4 * dm);
    lo.w_gate_up = arena.Add(2 * 2 * dff * dm);
    lo.w_down = arena.Add(2 * dm * dff);
    o.layers.push_back(lo);
  }
  return o;
}

GpuLayerWeights LayerPointers(const uint8_t* base, const LayerOffsets& lo) {
  auto f32 = [&](size_t at) {
    return at == kNone ? nullptr : reinterpret_cast<const float*>(base + at);
  };
  auto bf16 = [&](size_t at) { return reinterpret_cast<const uint16_t*>(base + at); };
  GpuLayerWeights gl;
  gl.attn_norm = f32(lo.attn_norm);
  gl.wqkv = bf16(lo.wqkv);
  gl.bqkv = f32(lo.bqkv);
  gl.q_norm = f32(lo.q_norm);
  gl.k_norm = f32(lo.k_norm);
  gl.wo = bf16(lo.wo);
  gl.ffn_norm = f32(lo.ffn_norm);
  gl.w_gate_up = bf16(lo.w_gate_up);
  gl.w_down = bf16(lo.w_down);
  return gl;
}

}  // namespace

absl::StatusOr<GpuWeights> GpuWeights::Upload(const model::ModelConfig& c,
                                              const model::ModelWeights& w) {
  ArenaLayout arena;
  const Offsets o = Plan(c, !w.output.empty(), !w.rope_freqs.empty(), arena);
  GpuWeights g;
  OSCARKV_RETURN_IF_ERROR(g.arena_.Allocate(arena.bytes, "model weights"));
  uint8_t* base = g.arena_.as<uint8_t>();
  std::vector<uint16_t> staging;
  // Concatenates float tensors, rounds them to bf16 and copies them to base + at.
  auto put_bf16 = [&](size_t at, std::initializer_list<const std::vector<float>*> parts) {
    staging.clear();
    for (const auto* p : parts) {
      for (float f : *p) staging.push_back(kvformat::FloatToBf16Bits(f));
    }
    return CudaStatus(cudaMemcpy(base + at, staging.data(), staging.size() * 2,
                                 cudaMemcpyHostToDevice),
                      "copying weights to the GPU");
  };
  auto put_f32 = [&](size_t at, std::initializer_list<const std::vector<float>*> parts) {
    size_t off = 0;
    for (const auto* p : parts) {
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(base + at + off, p->data(), p->size() * 4,
                                                    cudaMemcpyHostToDevice),
                                         "copying weights to the GPU"));
      off += p->size() * 4;
    }
    return absl::OkStatus();
  };
  OSCARKV_RETURN_IF_ERROR(put_bf16(o.token_embd, {&w.token_embd}));
  if (!w.output.empty()) OSCARKV_RETURN_IF_ERROR(put_bf16(o.output, {&w.output}));
  OSCARKV_RETURN_IF_ERROR(put_f32(o.output_norm, {&w.output_norm}));
  if (o.rope_freqs != kNone) OSCARKV_RETURN_IF_ERROR(put_f32(o.rope_freqs, {&w.rope_freqs}));
  g.token_embd_ = reinterpret_cast<const uint16_t*>(base + o.token_embd);
  g.output_ = reinterpret_cast<const uint16_t*>(base + o.output);
  g.output_norm_ = reinterpret_cast<const float*>(base + o.output_norm);
  g.rope_freqs_ = o.rope_freqs == kNone ? nullptr : reinterpret_cast<const float*>(base + o.rope_freqs);
  for (int l = 0; l < c.num_layers; ++l) {
    const model::LayerWeights& lw = w.layers[l];
    const LayerOffsets& lo = o.layers[l];
    OSCARKV_RETURN_IF_ERROR(put_f32(lo.attn_norm, {&lw.attn_norm}));
    OSCARKV_RETURN_IF_ERROR(put_bf16(lo.wqkv, {&lw.wq, &lw.wk, &lw.wv}));
    if (lo.bqkv != kNone) OSCARKV_RETURN_IF_ERROR(put_f32(lo.bqkv, {&lw.bq, &lw.bk, &lw.bv}));
    if (lo.q_norm != kNone) {
      OSCARKV_RETURN_IF_ERROR(put_f32(lo.q_norm, {&lw.q_norm}));
      OSCARKV_RETURN_IF_ERROR(put_f32(lo.k_norm, {&lw.k_norm}));
    }
    OSCARKV_RETURN_IF_ERROR(put_bf16(lo.wo, {&lw.wo}));
    OSCARKV_RETURN_IF_ERROR(put_f32(lo.ffn_norm, {&lw.ffn_norm}));
    OSCARKV_RETURN_IF_ERROR(put_bf16(lo.w_gate_up, {&lw.w_gate, &lw.w_up}));
    OSCARKV_RETURN_IF_ERROR(put_bf16(lo.w_down, {&lw.w_down}));
    g.layers_.push_back(LayerPointers(base, lo));
  }
  return g;
}

absl::StatusOr<GpuWeights> GpuWeights::Random(const model::ModelConfig& c, uint64_t seed) {
  ArenaLayout arena;
  const Offsets o = Plan(c, /*has_output=*/true, /*has_rope_freqs=*/false, arena);
  GpuWeights g;
  OSCARKV_RETURN_IF_ERROR(g.arena_.Allocate(arena.bytes, "model weights"));
  uint8_t* base = g.arena_.as<uint8_t>();
  uint64_t next_seed = seed;
  auto mat = [&](size_t at, int64_t rows, int64_t cols) {
    return CudaStatus(FillRandomBf16(reinterpret_cast<uint16_t*>(base + at), rows * cols,
                                     1.0f / std::sqrt(static_cast<float>(cols)), ++next_seed,
                                     nullptr),
                      "random weights");
  };
  auto ones = [&](size_t at, int64_t n) {
    return CudaStatus(FillRandomF32(reinterpret_cast<float*>(base + at), n, 1.0f, 1.0f, 0, nullptr),
                      "random weights");
  };
  const int64_t dm = c.d_model, qkv = int64_t{c.num_heads + 2 * c.num_kv_heads} * c.head_dim;
  const int64_t qdim = int64_t{c.num_heads} * c.head_dim, dff = c.d_ff;
  OSCARKV_RETURN_IF_ERROR(mat(o.token_embd, c.vocab_size, dm));
  OSCARKV_RETURN_IF_ERROR(mat(o.output, c.vocab_size, dm));
  OSCARKV_RETURN_IF_ERROR(ones(o.output_norm, dm));
  g.token_embd_ = reinterpret_cast<const uint16_t*>(base + o.token_embd);
  g.output_ = reinterpret_cast<const uint16_t*>(base + o.output);
  g.output_norm_ = reinterpret_cast<const float*>(base + o.output_norm);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerOffsets& lo = o.layers[l];
    OSCARKV_RETURN_IF_ERROR(ones(lo.attn_norm, dm));
    OSCARKV_RETURN_IF_ERROR(mat(lo.wqkv, qkv, dm));
    if (lo.bqkv != kNone) {
      OSCARKV_RETURN_IF_ERROR(CudaStatus(
          FillRandomF32(reinterpret_cast<float*>(base + lo.bqkv), qkv, -0.1f, 0.1f, ++next_seed,
                        nullptr),
          "random weights"));
    }
    if (lo.q_norm != kNone) {
      OSCARKV_RETURN_IF_ERROR(ones(lo.q_norm, c.head_dim));
      OSCARKV_RETURN_IF_ERROR(ones(lo.k_norm, c.head_dim));
    }
    OSCARKV_RETURN_IF_ERROR(mat(lo.wo, dm, qdim));
    OSCARKV_RETURN_IF_ERROR(ones(lo.ffn_norm, dm));
    OSCARKV_RETURN_IF_ERROR(mat(lo.w_gate_up, 2 * dff, dm));
    OSCARKV_RETURN_IF_ERROR(mat(lo.w_down, dm, dff));
    g.layers_.push_back(LayerPointers(base, lo));
  }
  OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "random weights"));
  return g;
}

}  // namespace oscarkv::model_gpu
