// The serving engine: one model + one codec, doing what prefill and decode workers (and
// `oscarkv generate`) do with it — chunked prefill whose KV comes out as kvformat blocks,
// rebuilding a sequence's three-tier cache from blocks, and batched decode steps.
//
// Prefill semantics (docs/DECISIONS.md "Chunked prefill over the stored prefix"): the prompt is
// processed in chunks of `chunk_tokens` (default 256, a multiple of the block size). Each chunk
// attends to itself in BF16 (causal), to the sink (first 64 tokens) in BF16, and to every earlier
// token in its stored (quantised) form. Hence the KV of a token is a function of its prefix and
// the codec only, so blocks stored by one request are bit-identical to what a later request
// sharing the prefix would compute: a prefix hit skips work without changing any output.
// A hit is used up to a chunk boundary at least `recent_tokens` before the prompt's end, so the
// recomputed tail fills the BF16 recent window exactly as without a hit.
//
// Blocks of a prompt of n tokens (block size B = 64): block 0 is the BF16 sink block; blocks
// [1, R) are history blocks in the codec's stored form, where R*B is the reuse boundary; the rest
// (up to n, the last one possibly partial) are BF16 blocks carrying the tail for the decode
// worker. Only blocks [0, R) are "reusable" (stored in the kvstore under their chain keys).
#ifndef OSCARKV_LIB_ENGINE_SERVING_ENGINE_H_
#define OSCARKV_LIB_ENGINE_SERVING_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/engine/quant_kv_cache.h"
#include "lib/kvformat/block.h"
#include "lib/kvformat/block_key.h"
#include "lib/kvformat/int2_block.h"
#include "lib/model/model.h"

namespace oscarkv::engine {

// The default model's calibration for `oscar`, written by scripts/setup.sh (relative to the
// repository root, where the README's commands run).
inline constexpr char kDefaultCalibrationPath[] = "data/calibration/smollm2-135m-oscar.cal";
// The same for oscar-gram (M5: rotations from K^T K / V^T V).
inline constexpr char kDefaultGramCalibrationPath[] =
    "data/calibration/smollm2-135m-oscar-gram.cal";

// The default model's calibration file for `codec` ("" when the codec needs none or is
// unknown): kDefaultCalibrationPath (objectives qqt/sst) or kDefaultGramCalibrationPath
// (ktk/vtv), both made by scripts/setup.sh.
std::string DefaultCalibrationFor(const std::string& codec);

// The calibration file to use: `flag` when given; else, for the default model,
// DefaultCalibrationFor(codec); else empty.
std::string ResolveCalibrationPath(const std::string& flag, const std::string& model_spec,
                                   const std::string& codec);

// What a worker (or `oscarkv serve`) loads: `flag` when given; else DefaultCalibrationFor(codec)
// when that file exists in the working directory or under `source_dir` (the build's source
// tree, so tests find it from any directory; "" = not tried); else "".
std::string ResolveWorkerCalibrationPath(const std::string& flag, const std::string& codec,
                                         const std::string& source_dir = "");

struct ServingEngineOptions {
  std::string codec = "oscar";    // lib/quant codec name; Default: oscar
  std::string calibration_path;   // required for calibrated codecs; Default: none
  int chunk_tokens = 256;         // prefill chunk, a multiple of block_tokens; Default: 256
  int block_tokens = kvformat::kDefaultBlockTokens;  // tokens per block; Default: 64
};

// One block of a sequence: its chain key (zero for tail blocks) and serialized bytes.
struct SequenceBlock {
  kvformat::BlockKey key;
  bool reusable = false;          // a canonical prefix block (stored in the kvstore)
  std::vector<std::byte> bytes;   // kvformat::SerializeBlock output
};

struct PrefillResult {
  // Three-tier cache holding the whole prompt, rebuilt from the blocks (null when the caller
  // asked for none: a prefill worker only ships the blocks).
  std::unique_ptr<model::Sequence> sequence;
  std::vector<float> last_logits;             // [vocab] logits after the last prompt token
  std::vector<SequenceBlock> blocks;          // the prompt's KV as blocks (see file comment)
  int64_t reused_tokens = 0;                  // tokens taken from `reused` blocks
  int64_t computed_tokens = 0;                // tokens run through the model
};

// Receives the logits of each computed prefill chunk: `logits` is [rows, vocab], row r the
// distribution after prompt position first_position + r (so it predicts the token after it).
using ChunkLogitsSink =
    std::function<absl::Status(int64_t first_position, std::span<const float> logits)>;

// Asked before each prefill chunk: a non-OK status ends the prefill with that status, so that a
// prompt whose caller left (or whose deadline passed) is not computed to the end for nobody.
using PrefillStopCheck = std::function<absl::Status()>;

class ServingEngine {
 public:
  // `model` must outlive the engine. Errors of KvCacheFactory::Create; kInvalidArgument for
  // bad chunk/block sizes.
  static absl::StatusOr<std::unique_ptr<ServingEngine>> Create(const model::Model* model,
                                                               ServingEngineOptions options);

  const model::Model& model() const { return *model_; }
  const ServingEngineOptions& options() const { return options_; }
  const quant::CodecSpec& codec() const { return factory_->spec(); }
  // The cache configuration every sequence of this engine uses (codec, rotations, clip ratios).
  quant::ThreeTierCacheConfig tier_config() const { return factory_->tier_config(); }
  uint64_t model_fingerprint() const { return model_fingerprint_; }
  uint64_t calibration_fingerprint() const { return factory_->calibration_fingerprint(); }

  // Tokens of a prompt of `prompt_tokens` that stored blocks may supply: a multiple of
  // chunk_tokens that leaves at least the codec's recent window (and at least one token).
  int64_t ReuseBoundary(int64_t prompt_tokens) const;
  // Key-chain parameters (fingerprints, codec, block size) of this engine's blocks.
  kvformat::KeyChainParams KeyParams() const;

  // Chain keys of the reusable blocks of a prompt (what to look up in the kvstore).
  std::vector<kvformat::BlockKey> ReusableKeys(std::span<const int32_t> prompt) const;

  // Prefills `prompt`. `reused`: parsed blocks for a leading run of the prompt's reusable
  // blocks (from the kvstore, in order, keys already matched); any that go past the reuse
  // boundary of this prompt are ignored. `build_sequence`: also rebuild the decode cache from
  // the blocks (PrefillResult::sequence), as a decode worker would. `on_chunk_logits` (optional):
  // every position's logits go there, chunk by chunk (the model's lm head then runs on every
  // row, not only the last; reused positions have none); its error ends the prefill.
  // `stop_check` (optional): asked before each chunk; its error ends the prefill.
  // @return kInvalidArgument for an empty prompt or bad tokens; kFailedPrecondition when a
  //   reused block does not fit (codec, fingerprints, positions); model errors; stop_check's.
  absl::StatusOr<PrefillResult> Prefill(std::span<const int32_t> prompt,
                                        std::span<const kvformat::BlockView> reused = {},
                                        bool build_sequence = true,
                                        const ChunkLogitsSink* on_chunk_logits = nullptr,
                                        const PrefillStopCheck* stop_check = nullptr) const;

  // Rebuilds a sequence from ALL of a prompt's blocks (as Prefill produced them, in order):
  // the result decodes exactly like PrefillResult::sequence.
  // @return kInvalidArgument / kFailedPrecondition for blocks that do not fit this engine or
  //   are out of order.
  absl::StatusOr<std::unique_ptr<model::Sequence>> SequenceFromBlocks(
      std::span<const kvformat::BlockView> blocks) const;

  // One decode step over several sequences (Model::DecodeStep).
  absl::Status DecodeStep(std::span<model::Sequence* const> seqs, std::span<const int32_t> tokens,
                          std::vector<float>* logits) const;

  // Bytes the sequence's KV occupies in its cache (for memory accounting and metrics).
  int64_t SequenceKvBytes(model::Sequence& seq) const;
  // What SequenceKvBytes reports for a sequence of `tokens` tokens (quant::BytesInUseAt), without
  // one: a decode worker admits a sequence by its bytes at the longest it may grow to.
  int64_t KvBytesAt(int64_t tokens) const;

 private:
  ServingEngine() = default;
  const model::Model* model_ = nullptr;
  ServingEngineOptions options_;
  std::unique_ptr<KvCacheFactory> factory_;
  uint64_t model_fingerprint_ = 0;
};

// A worker's ServingEngine for `codec` with ResolveWorkerCalibrationPath(calibration, codec,
// source_dir). @return errors of ServingEngine::Create; kFailedPrecondition saying how to make
// the file when the codec needs a calibration and none was found.
absl::StatusOr<std::unique_ptr<ServingEngine>> LoadWorkerServingEngine(
    const model::Model* model, const std::string& codec, const std::string& calibration,
    int chunk_tokens, const std::string& source_dir = "");

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_SERVING_ENGINE_H_
