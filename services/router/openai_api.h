// The OpenAI wire format, without sockets: parsing and validating request bodies of
// /v1/completions and /v1/chat/completions into domain values, and building the response
// bodies, stream chunks and error objects. router_http_service.cc does the HTTP around it.
// Pure functions; thread-safe.
//
// Accepted fields (others are ignored, as OpenAI-compatible servers do):
//   model (required), prompt (one or a batch) | messages (required), max_tokens |
//   max_completion_tokens, temperature [0,2], top_p (0,1], presence_penalty and
//   frequency_penalty [-2,2], logit_bias (token id -> [-100,100]), n [1,16], best_of (only = n),
//   stream, stream_options.include_usage, stop (string or up to 4 strings), seed, logprobs
//   (completions: integer [0,20]; chat: boolean, with top_logprobs [0,20]), echo (completions;
//   max_tokens may then be 0), user. Rejected as unsupported: non-empty tools / functions
//   (unless tool_choice "none"), tool_choice other than none / auto, response_format other than
//   text, a non-empty suffix.
//   Extensions: session_id (string; also header X-Session-Id), codec (string); as in vLLM:
//   top_k (integer >= -1; -1 and 0 = off), return_tokens_as_token_ids, ignore_eos (booleans),
//   min_tokens (integer >= 0), stop_token_ids (up to 64 token ids), prompt_logprobs (integer
//   [0,20]; not with stream).
#ifndef OSCARKV_SERVICES_ROUTER_OPENAI_API_H_
#define OSCARKV_SERVICES_ROUTER_OPENAI_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "services/router/completion_backend.h"

namespace oscarkv::router {

enum class Endpoint { kCompletions, kChatCompletions };

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" → null
  std::string code;   // "" → null
};
std::string ApiErrorBody(const ApiError& error);

// Maps a backend/placement status to an HTTP error: kInvalidArgument/kOutOfRange/
// kFailedPrecondition 400, kNotFound 404, kResourceExhausted 429, kUnavailable 503,
// kDeadlineExceeded 504, kUnimplemented 501, kCancelled 499, others 500.
ApiError ApiErrorFromStatus(const absl::Status& status);

// What the router accepts from the client, before tokenization.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // One prompt, or several (/v1/completions' batched prompts: a list of strings or of token-id
  // lists); choice i * n + j of the response is prompt i's j-th completion.
  std::vector<PromptInput> prompts;
  std::optional<int> max_tokens;  // absent → config default, clipped to the context; 0 only
                                  // with echo
  bool echo = false;              // completions: the prompt comes back before the completion
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;  // 0 = off
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::vector<std::pair<int32_t, double>> logit_bias;  // token id -> bias
  bool ignore_eos = false;  // vLLM's extension
  int min_tokens = 0;       // vLLM's extension; checked against max_tokens by the HTTP layer
  std::vector<int32_t> stop_token_ids;  // vLLM's extension
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int logprobs = -1;  // -1 = off; else the number of alternatives per token (top_logprobs)
  int prompt_logprobs = -1;  // vLLM's extension: -1 = off; else alternatives per prompt token
  int n = 1;          // choices, [1, kMaxChoices]
  bool return_tokens_as_token_ids = false;  // vLLM's extension: logprobs name ids, not pieces
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string session_id;      // "" when none
  std::string codec;           // "" → the configured default
};

// The most choices (`n`) one request may ask for.
inline constexpr int kMaxChoices = 16;
// The most choices (prompts x n) one request may ask for in all.
inline constexpr int kMaxTotalChoices = 64;
// The deepest nesting of arrays and objects a request body may have (OpenAI's own bodies need
// 4-5 levels). nlohmann::json copies and destroys nested values recursively, so a body of
// 140 KB nested 70,000 deep overflowed a handler thread's stack and took the process down.
inline constexpr int kMaxJsonDepth = 64;

struct ApiLimits {
  int max_tokens_limit = 4096;
  bool allow_codec_override = true;
  std::vector<std::string> allowed_codecs;
};

struct ParseResult {
  std::optional<ApiError> error;  // set when the request is rejected; `request` is then unspecified
  ApiRequest request;
};

// Validates content type and body. `session_header` is the X-Session-Id header ("" if absent);
// it must agree with the body's session_id when both are present.
ParseResult ParseApiRequest(Endpoint endpoint, std::string_view content_type,
                            std::string_view body, std::string_view session_header,
                            const ApiLimits& limits);

// "stop" or "length".
std::string_view FinishReasonName(FinishReason reason);

// Response pieces. `id` is the full response id ("cmpl-..." / "chatcmpl-..."), `created` unix s.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;
  int64_t created = 0;
  std::string model;
  std::string session_id;  // echoed in responses when non-empty (extension)
  // Streaming with stream_options.include_usage: every chunk but the last carries "usage": null
  // (OpenAI's shape); the last is StreamUsageEvent's.
  bool stream_usage = false;
};
struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// The logprobs of a response's tokens (or of one stream chunk's), each with the offset of its
// text in the choice's text (the echoed prompt's included), in characters (/v1/completions'
// text_offset).
struct ResponseLogprobs {
  std::vector<TokenLogprob> tokens;
  std::vector<int> text_offsets;  // parallel to tokens
  bool tokens_as_ids = false;     // vLLM's return_tokens_as_token_ids: "token_id:<id>" strings
};

// Non-streaming body: object "text_completion" or "chat.completion". The choice's "logprobs" is
// null when `logprobs` is nullptr, else in the endpoint's shape: for /v1/completions {tokens,
// token_logprobs, top_logprobs (objects in order, most likely first), text_offset}, for chat
// {content: [{token, logprob, bytes, top_logprobs}], refusal}. A -inf logprob is written as
// -9999.0 (JSON has no infinity); an unscored token (an echoed prompt's first) has null
// token_logprobs and top_logprobs entries.
std::string CompletionBody(const ResponseMeta& meta, const std::string& text, FinishReason reason,
                           const Usage& usage, const ResponseLogprobs* logprobs = nullptr);
// The same with several choices (`n`), indexed 0, 1, ... in order.
struct ChoiceBody {
  std::string text;
  FinishReason reason = FinishReason::kLength;
  const ResponseLogprobs* logprobs = nullptr;
  // vLLM's prompt_logprobs (per choice on completions, choice 0's at the top level on chat):
  // one entry per prompt token, the first unscored (null).
  const std::vector<TokenLogprob>* prompt_logprobs = nullptr;
};
std::string CompletionBody(const ResponseMeta& meta, const std::vector<ChoiceBody>& choices,
                           const Usage& usage);
// One SSE event ("data: {...}\n\n") of object "text_completion" / "chat.completion.chunk",
// for choice `index`. For chat, StreamRoleEvent is the opening {"role":"assistant",
// "content":""} delta.
std::string StreamTextEvent(const ResponseMeta& meta, const std::string& text,
                            const ResponseLogprobs* logprobs = nullptr, int index = 0);
std::string StreamRoleEvent(const ResponseMeta& meta, int index = 0);
std::string StreamFinishEvent(const ResponseMeta& meta, FinishReason reason, int index = 0);
std::string StreamUsageEvent(const ResponseMeta& meta, const Usage& usage);  // empty choices
std::string StreamErrorEvent(const ApiError& error);
inline constexpr std::string_view kStreamDoneEvent = "data: [DONE]\n\n";

// GET /v1/models body.
std::string ModelsBody(const std::vector<ModelInfo>& models);
// GET /v1/models/{id} body: one model object.
std::string ModelBody(const ModelInfo& model);

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_OPENAI_API_H_
