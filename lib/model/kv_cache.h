// The KV cache seen by the forward pass: a per-sequence store of post-RoPE keys and values per
// layer, and attention of one query token over everything stored. The forward pass only talks
// to this interface, so the three-tier cache of lib/quant (BF16 sink, INT2 history, BF16
// recent) plugs in beside the plain implementation here.
#ifndef OSCARKV_LIB_MODEL_KV_CACHE_H_
#define OSCARKV_LIB_MODEL_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace oscarkv::model {

class KvCache {
 public:
  virtual ~KvCache() = default;

  // Appends `num_tokens` tokens to `layer`. `k` and `v` are [num_tokens, num_kv_heads, head_dim]
  // float32, post-RoPE, not rounded. Layers are appended independently; callers append the
  // same tokens to every layer, in order.
  // @return kInvalidArgument for a bad layer; kResourceExhausted when the cache is full.
  virtual absl::Status AppendLayer(int layer, const float* k, const float* v, int num_tokens) = 0;

  // Attention of one query token over every token appended to `layer` so far:
  //   out[h] = sum_t softmax_t(scale * q[h] . K[t, g]) V[t, g],  g = h / (num_q_heads / num_kv_heads)
  // `q` and `out` are [num_q_heads, head_dim] float32 (q post-RoPE). No causal mask: the caller
  // appends the query's own K/V first.
  // @return kInvalidArgument for a bad layer or head count; kFailedPrecondition when empty.
  virtual absl::Status Attend(int layer, const float* q, int num_q_heads, float scale,
                              float* out) = 0;

  // Tokens stored in `layer`.
  virtual int64_t Length(int layer) const = 0;

  // Whether Attend shares its work over the CPU pool (model/thread_pool.h) when the pool is free:
  // a decode batch then runs this sequence's long attention alone rather than on one thread.
  virtual bool AttendsOverThePool() const { return false; }
};

// Keeps every token's K/V as float32, optionally rounded to bf16 first (the "bf16" codec, the
// baseline; prefill attention over the prompt uses the same rounding). Not thread-safe.
class FullKvCache : public KvCache {
 public:
  // `round_to_bf16`: Default true (store bf16-representable values, as a BF16 cache would).
  FullKvCache(int num_layers, int num_kv_heads, int head_dim, bool round_to_bf16 = true);

  absl::Status AppendLayer(int layer, const float* k, const float* v, int num_tokens) override;
  absl::Status Attend(int layer, const float* q, int num_q_heads, float scale,
                      float* out) override;
  int64_t Length(int layer) const override;

 private:
  int num_layers_;
  int num_kv_heads_;
  int head_dim_;
  bool round_to_bf16_;
  std::vector<std::vector<float>> k_;  // per layer: [T, num_kv_heads, head_dim]
  std::vector<std::vector<float>> v_;
  std::vector<float> scores_;          // scratch
};

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_KV_CACHE_H_
