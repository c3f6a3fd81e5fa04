#include "services/router/testing_echo_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace oscarkv::router {

std::vector<ModelInfo> EchoCompletionBackend::Models() const {
  ModelInfo m;
  m.id = kModelId;
  m.context_length = kContextLength;
  m.owned_by = "oscarkv-testing";
  return {m};
}

absl::StatusOr<std::vector<int32_t>> EchoCompletionBackend::Tokenize(const std::string& model,
                                                                     const PromptInput& prompt) {
  if (model != kModelId) return absl::NotFoundError(absl::StrCat("unknown model ", model));
  if (prompt.token_ids) return *prompt.token_ids;
  std::string text;
  if (prompt.text) text = *prompt.text;
  if (prompt.messages) {
    for (size_t i = 0; i < prompt.messages->size(); ++i) {
      if (i > 0) text += "\n";
      text += (*prompt.messages)[i].content;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

absl::StatusOr<CompletionOutcome> EchoCompletionBackend::Complete(const CompletionRequest& request,
                                                                  const TokenCallback& on_token) {
  std::string text;
  for (int32_t id : request.prompt_token_ids) text.push_back(id >= 0 && id < 256 ? id : '?');
  std::vector<std::string> words = absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  CompletionOutcome out;
  if (DeliversPrompt(request)) {
    const int top = PromptScoreAlternatives(request);
    std::string held;  // bytes of an unfinished UTF-8 character
    for (size_t i = 0; i < request.prompt_token_ids.size(); ++i) {
      const int32_t id = request.prompt_token_ids[i];
      held.push_back(text[i]);
      const bool continues =
          i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
      TokenEvent t{id, continues ? std::string() : std::exchange(held, ""), std::nullopt, true};
      if (top >= 0) {
        t.logprob = TokenLogprob{std::string(1, text[i]), 0.0, {}, id, /*scored=*/i > 0};
        if (top > 0 && i > 0) t.logprob->top.push_back({t.logprob->piece, 0.0, id});
      }
      if (!on_token(t)) return absl::CancelledError("echo: consumer gone");
    }
  }
  for (size_t i = 0; i < words.size(); ++i) {
    if (out.completion_tokens == request.max_tokens) return out;  // kLength
    if (absl::Now() > request.deadline) return absl::DeadlineExceededError("echo: deadline passed");
    TokenEvent t{static_cast<int32_t>(i), absl::StrCat(i == 0 ? "" : " ", words[i])};
    if (request.logprobs >= 0) {
      t.logprob = TokenLogprob{t.text, 0.0, {}, t.token_id};
      if (request.logprobs > 0) t.logprob->top.push_back({t.text, 0.0, t.token_id});
    }
    if (!on_token(t)) return absl::CancelledError("echo: consumer gone");
    ++out.completion_tokens;
  }
  out.finish_reason = FinishReason::kStop;
  return out;
}

}  // namespace oscarkv::router
