// Byte-level BPE tokenizer built from GGUF metadata (tokenizer.ggml.model "gpt2") or from a
// Hugging Face tokenizer.json (+ tokenizer_config.json): tokens, merges, token types, the
// pre-tokenizer (named by tokenizer.ggml.pre, or recognised from tokenizer.json's regex),
// special tokens, and a ChatML chat template. Immutable after creation; thread-safe for
// concurrent const use.
#ifndef OSCARKV_LIB_MODEL_TOKENIZER_H_
#define OSCARKV_LIB_MODEL_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/gguf_file.h"

namespace oscarkv::model {

// How text is split into words before BPE (tokenizer.ggml.pre).
enum class PreTokenizer {
  kGpt2,    // "gpt2" and unknown BPE names: GPT-2's regex
  kSmolLm,  // "smollm", "starcoder", "refact", ...: every digit alone, then GPT-2's regex
  kLlama3,  // "llama-bpe", ...: Llama 3 regex (case-insensitive contractions, digits in 3s)
  kQwen2,   // "qwen2", ...: the Llama 3 regex with every digit alone
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  // @return kUnimplemented for a tokenizer model other than "gpt2" (byte-level BPE);
  //   kNotFound/kInvalidArgument for missing or inconsistent tokenizer metadata.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  // From `dir`/tokenizer.json (model "BPE" with a ByteLevel pre-tokenizer or decoder; vocab,
  // merges as "a b" strings or [a, b] pairs; added_tokens: special ones become control tokens,
  // others user-defined) and, when present, `dir`/tokenizer_config.json (bos/eos tokens,
  // add_bos_token, chat_template) or `dir`/chat_template.jinja. BOS is also added when the
  // post-processor is a TemplateProcessing starting with a special token. The pre-tokenizer
  // must be one we implement: ByteLevel with its regex (GPT-2), Digits + ByteLevel (SmolLM),
  // or Split with the exact Llama 3 or Qwen2 regex then ByteLevel; an NFC normalizer is
  // accepted (text is assumed NFC already), others are not.
  // @return kNotFound when tokenizer.json is missing; kUnimplemented naming an unsupported
  //   model type, pre-tokenizer or normalizer; kInvalidArgument for malformed JSON.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromHfFiles(const std::string& dir);

  // A tokenizer with no tokens, for checkpoints without tokenizer files (token-id use only):
  // Encode returns no ids, Decode returns "", vocab_size() is 0 (see Model::has_tokenizer).
  static std::unique_ptr<Tokenizer> CreateEmpty();

  // Token ids of `text`. `add_special`: prepend BOS when the model asks for it
  // (tokenizer.ggml.add_bos_token). `parse_special`: text such as "<|im_start|>" becomes its
  // control token rather than being spelled out.
  std::vector<int32_t> Encode(std::string_view text, bool add_special,
                              bool parse_special = true) const;
  // The text of `ids` (bytes joined; invalid UTF-8 passes through). Control tokens are
  // rendered as their text unless `skip_special`.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes of one token (empty for out-of-range ids).
  std::string TokenToPiece(int32_t id) const;

  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }
  PreTokenizer pre_tokenizer() const { return pre_; }
  // True for tokens that end generation: EOS, EOT, <|im_end|>, <|endoftext|>.
  bool IsEndOfGeneration(int32_t id) const;
  // Those tokens' ids (what IsEndOfGeneration answers true for).
  const std::vector<int32_t>& end_of_generation_ids() const { return end_ids_; }
  // Id of a token by its exact text, or -1.
  int32_t TokenId(std::string_view text) const;

  // Renders a ChatML conversation ("<|im_start|>role\ncontent<|im_end|>\n" per message, then
  // "<|im_start|>assistant\n" when add_generation_prompt). When the model's template injects a
  // default system prompt if the first message is not "system", so do we (text taken from the
  // template). @return kUnimplemented when the template is not ChatML-style.
  absl::StatusOr<std::string> ApplyChatTemplate(std::span<const ChatMessage> messages,
                                                bool add_generation_prompt) const;

  // Splits text (no special tokens) into pre-tokenizer words; exposed for tests.
  std::vector<std::string> PreTokenize(std::string_view text) const;

 private:
  Tokenizer() = default;
  // Builds the lookup tables, end ids, ChatML detection and the byte map once tokens_,
  // token_types_, pre_, bos/eos ids and chat_template_ are set.
  void Finish(const std::vector<std::string>& merges);
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;

  std::vector<std::string> tokens_;  // as stored (byte-level mapped for normal tokens)
  std::vector<int32_t> token_types_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::vector<int32_t> specials_;  // control and user-defined token ids, longest text first
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::vector<int32_t> end_ids_;
  bool add_bos_ = false;
  std::string chat_template_;
  bool chatml_ = false;
  std::string default_system_;  // empty: none
  std::string byte_to_utf8_[256];  // byte-level mapping: byte -> UTF-8 of its code point
  std::unordered_map<uint32_t, uint8_t> cp_to_byte_;
};

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_TOKENIZER_H_
