// The engine interface the router's HTTP layer calls: one generation request in, a stream of
// tokens out. Two implementations exist (or will): a gRPC client that drives a placed
// (prefill, decode) worker pair (`remote_completion_backend.h`), and an in-process engine for the
// all-in-one `oscarkv serve`, which `tools/` wires. The HTTP layer (`router_http_service.h`) knows
// only this header, so neither implementation sees HTTP or JSON.
//
// Thread-safety: implementations must accept concurrent calls to every method from many threads.
#ifndef OSCARKV_SERVICES_ROUTER_COMPLETION_BACKEND_H_
#define OSCARKV_SERVICES_ROUTER_COMPLETION_BACKEND_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace oscarkv::router {

// One chat turn. `role` is one of system, developer, user, assistant, tool (checked by the HTTP
// layer); `content` is plain text (array-of-parts content is flattened to text before this point).
struct ChatMessage {
  std::string role;
  std::string content;
};

// The prompt of a request: exactly one of `text`, `token_ids` or `messages` is set.
struct PromptInput {
  std::optional<std::string> text;                    // /v1/completions, string prompt
  std::optional<std::vector<int32_t>> token_ids;      // /v1/completions, token-id prompt
  std::optional<std::vector<ChatMessage>> messages;   // /v1/chat/completions; template applied
                                                      // by the backend's tokenizer
};

// The most alternatives a request may ask for per token (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;

// A validated generation request. The HTTP layer fills every field; backends may rely on the
// ranges stated here.
struct CompletionRequest {
  std::string request_id;            // unique per router process, e.g. "cmpl-5f0c..."
  std::string model;                 // one of the ids Models() returned
  std::vector<int32_t> prompt_token_ids;  // the tokenized prompt (from Tokenize), never empty
  int max_tokens = 16;               // >= 1 (>= 0 with echo); prompt + max_tokens <= the
                                     // model's context length
  double temperature = 1.0;          // [0, 2]; 0 means greedy
  double top_p = 1.0;                // (0, 1]
  int top_k = 0;                     // >= 0; 0 = off
  double presence_penalty = 0.0;     // [-2, 2], OpenAI's, over the generated tokens
  double frequency_penalty = 0.0;    // [-2, 2]
  std::vector<std::pair<int32_t, double>> logit_bias;  // token id >= 0 -> bias in [-100, 100]
  bool ignore_eos = false;           // end-of-generation tokens do not end it (vLLM's)
  int min_tokens = 0;                // [0, max_tokens]: no stop before this many (vLLM's)
  std::vector<int32_t> stop_token_ids;  // >= 0: end the completion, not delivered (vLLM's)
  std::optional<uint64_t> seed;      // sampling seed, when the client set one
  std::vector<std::string> stop;     // up to 4 stop strings; the backend stops after a match
  int logprobs = -1;                 // >= 0: set TokenEvent::logprob, with this many (<= 20)
                                     // alternatives; -1 = off
  // Deliver the prompt first: one TokenEvent with `prompt` set per prompt token (its text
  // detokenized, no stop strings applied; with logprobs, each scored after the tokens before
  // it, the first unscored), then the generated tokens. /v1/completions' echo.
  bool echo = false;
  // >= 0 (<= 20): deliver the prompt's tokens as with echo, each scored with this many
  // alternatives (vLLM's prompt_logprobs); with echo and logprobs too, each prompt event
  // carries max(logprobs, prompt_logprobs) alternatives. -1 = off.
  int prompt_logprobs = -1;
  std::string session_id;            // Continuum program id ("" when none); see ARCHITECTURE §5
  std::string codec;                 // KV codec name (config default or an allowed override)
  absl::Time deadline = absl::InfiniteFuture();  // the backend returns kDeadlineExceeded after it
  // True once the consumer is gone (client disconnected, another choice failed), the same news
  // a TokenCallback gives by returning false, but answerable while no token flows (during the
  // prefill): a backend may poll it to stop early. Empty = never. Cheap, thread-safe.
  std::function<bool()> cancelled;
};

// Whether a backend delivers the prompt's tokens first (TokenEvent::prompt): with echo or
// prompt_logprobs.
inline bool DeliversPrompt(const CompletionRequest& r) {
  return r.echo || r.prompt_logprobs >= 0;
}
// The alternatives each delivered prompt token is scored with: max(logprobs with echo,
// prompt_logprobs); -1 = the prompt is not scored.
inline int PromptScoreAlternatives(const CompletionRequest& r) {
  return std::max(r.echo ? r.logprobs : -1, r.prompt_logprobs);
}

// A token's log-probability under the model (log-softmax of its logits, before temperature and
// penalties), with its bytes (`piece`: one token's text, possibly part of a UTF-8 character).
struct TokenAlternative {
  std::string piece;
  double logprob = 0;
  int32_t token_id = 0;
};
struct TokenLogprob {
  std::string piece;
  double logprob = 0;
  std::vector<TokenAlternative> top;  // the most likely tokens, most likely first
  int32_t token_id = 0;
  bool scored = true;  // false: an echoed prompt's first token, which nothing predicts
                       // (logprob and top unset; JSON null)
  int64_t rank = 1;    // 1 + the tokens the model finds more likely (vLLM's rank)
};

// One generated token, or with `prompt` an echoed prompt token. `text` is the detokenized piece
// to append to the output (may be empty for a token that completes a multi-byte character
// later; pieces concatenate to valid UTF-8).
struct TokenEvent {
  int32_t token_id = 0;
  std::string text;
  std::optional<TokenLogprob> logprob;  // when the request asked for logprobs
  bool prompt = false;  // a prompt token (CompletionRequest::echo / prompt_logprobs), not
                        // generated
};

// Why generation ended.
enum class FinishReason { kStop, kLength };

struct CompletionOutcome {
  FinishReason finish_reason = FinishReason::kLength;  // kStop: EOS or stop string; kLength: max_tokens
  int completion_tokens = 0;  // generated tokens delivered through the callback (not echoed ones)
};

// Called once per generated (or echoed) token, in order, never concurrently for one request.
// Returns false when the consumer is gone (client disconnected, deadline passed): the backend
// must then stop generating and return kCancelled (or kDeadlineExceeded) soon.
using TokenCallback = std::function<bool(const TokenEvent&)>;

// A served model, as listed by /v1/models.
struct ModelInfo {
  std::string id;                 // e.g. "SmolLM2-135M-Instruct"
  int context_length = 0;         // prompt + completion tokens, > 0
  std::string owned_by = "oscarkv";
  int64_t created_unix_s = 0;     // model load time, seconds since the epoch
  int vocab_size = 0;             // token ids are below this; 0: not known here
};

class CompletionBackend {
 public:
  virtual ~CompletionBackend() = default;

  //! The models this backend serves; never empty. Cheap; called per request.
  virtual std::vector<ModelInfo> Models() const = 0;

  //! Turns a prompt into token ids for `model` (chat messages go through the model's chat
  //! template, with the assistant turn opened). @return kInvalidArgument for a prompt the
  //! tokenizer rejects (e.g. token ids outside the vocabulary), kNotFound for an unknown model.
  virtual absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& model,
                                                        const PromptInput& prompt) = 0;

  //! Generates up to request.max_tokens tokens after request.prompt_token_ids, calling
  //! `on_token` for each one (after the prompt's tokens, with request.echo). Blocks until
  //! generation ends. Must honour request.deadline.
  //! @return the outcome, or kCancelled (callback returned false), kDeadlineExceeded,
  //! kUnavailable (no worker could take it; retryable), kResourceExhausted (overloaded),
  //! kInvalidArgument (request rejected by a worker), kInternal.
  virtual absl::StatusOr<CompletionOutcome> Complete(const CompletionRequest& request,
                                                     const TokenCallback& on_token) = 0;

  //! True when the backend can take requests now (workers registered and healthy, model
  //! loaded). Drives /readyz.
  virtual bool Ready() const = 0;
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_COMPLETION_BACKEND_H_
