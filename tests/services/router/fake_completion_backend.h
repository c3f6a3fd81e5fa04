// FakeCompletionBackend: a scriptable, deterministic CompletionBackend for router tests.
// Model "fake-model" with a small context (default 64 tokens). Tokenization: one token per
// prompt byte; chat messages become "<role>:<content>\n" bytes; token-id prompts pass through
// (ids >= 1000 are rejected as outside the vocabulary). Generation emits script.pieces in order,
// one per token; running out of pieces finishes with "stop", reaching max_tokens with "length".
// With `echo` (or prompt_logprobs), the prompt comes first, one token per id (text: the byte),
// with logprobs -0.5 each (alternatives: itself, then "?" id 999 at -1.5) but the first,
// unscored. Generated tokens have logprob -1 (no alternatives) when logprobs are asked for.
// Failure modes on cue: fail before the first token, fail after N tokens, or stall (ignoring the
// deadline) to test the router's own timeout.
#ifndef OSCARKV_TESTS_SERVICES_ROUTER_FAKE_COMPLETION_BACKEND_H_
#define OSCARKV_TESTS_SERVICES_ROUTER_FAKE_COMPLETION_BACKEND_H_

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "services/router/completion_backend.h"

namespace oscarkv::router::testing {

struct FakeScript {
  std::vector<std::string> pieces = {"Hello", ",", " world", "!"};
  absl::Status fail_before_first;  // non-OK: returned before any token
  int fail_after_tokens = -1;      // >= 0: return `fail_status` after this many tokens
  absl::Status fail_status = absl::InternalError("worker crashed");
  absl::Duration stall_for = absl::ZeroDuration();  // sleep this long first, ignoring the
                                                    // deadline (tests the router's own timeout)
  absl::Duration token_delay = absl::ZeroDuration();
  // A prefill of this long before any token, polling request.cancelled every 10 ms as a worker
  // backend does; stops with kCancelled when it answers true.
  absl::Duration prefill_for = absl::ZeroDuration();
  int context_length = 64;
  bool ready = true;
};

class FakeCompletionBackend final : public CompletionBackend {
 public:
  explicit FakeCompletionBackend(FakeScript script = {}) : script_(std::move(script)) {}

  std::vector<ModelInfo> Models() const override {
    ModelInfo m;
    m.id = "fake-model";
    m.context_length = script_.context_length;
    m.created_unix_s = 1700000000;
    m.vocab_size = 1000;
    return {m};
  }

  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& model,
                                                const PromptInput& prompt) override {
    if (model != "fake-model") return absl::NotFoundError("unknown model");
    if (prompt.token_ids) {
      for (int32_t id : *prompt.token_ids) {
        if (id >= 1000) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " >= vocab 1000"));
      }
      return *prompt.token_ids;
    }
    std::string text = prompt.text.value_or("");
    if (prompt.messages) {
      for (const ChatMessage& m : *prompt.messages) text += m.role + ":" + m.content + "\n";
    }
    return std::vector<int32_t>(text.begin(), text.end());
  }

  absl::StatusOr<CompletionOutcome> Complete(const CompletionRequest& request,
                                             const TokenCallback& on_token) override {
    {
      absl::MutexLock lock(&mu_);
      last_request_ = request;
      requests_.push_back(request);
      ++calls_;
    }
    if (!script_.fail_before_first.ok()) return script_.fail_before_first;
    absl::SleepFor(script_.stall_for);
    for (const absl::Time end = absl::Now() + script_.prefill_for; absl::Now() < end;) {
      if (request.cancelled && request.cancelled()) {
        prefill_cancellations_.fetch_add(1);
        return absl::CancelledError("fake: prefill cancelled");
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    CompletionOutcome out;
    if (DeliversPrompt(request)) {
      const int top = PromptScoreAlternatives(request);
      for (size_t i = 0; i < request.prompt_token_ids.size(); ++i) {
        const int32_t id = request.prompt_token_ids[i];
        TokenEvent t{id, std::string(1, static_cast<char>(id)), std::nullopt, /*prompt=*/true};
        if (top >= 0) {
          t.logprob = TokenLogprob{t.text, i == 0 ? 0.0 : -0.5, {}, id, /*scored=*/i > 0};
          if (i > 0 && top > 0) t.logprob->top.push_back({t.text, -0.5, id});
          if (i > 0 && top > 1) t.logprob->top.push_back({"?", -1.5, 999});
        }
        if (!on_token(t)) return absl::CancelledError("fake: consumer gone");
      }
    }
    for (size_t i = 0; i < script_.pieces.size(); ++i) {
      if (out.completion_tokens == request.max_tokens) return out;
      if (script_.fail_after_tokens >= 0 && out.completion_tokens == script_.fail_after_tokens) {
        return script_.fail_status;
      }
      absl::SleepFor(script_.token_delay);
      TokenEvent t{static_cast<int32_t>(100 + i), script_.pieces[i]};
      if (request.logprobs >= 0) t.logprob = TokenLogprob{t.text, -1.0, {}, t.token_id};
      if (!on_token(t)) {
        cancelled_after_tokens_.store(out.completion_tokens);
        cancellations_.fetch_add(1);
        return absl::CancelledError("fake: consumer gone");
      }
      ++out.completion_tokens;
    }
    out.finish_reason = FinishReason::kStop;
    return out;
  }

  bool Ready() const override { return script_.ready; }

  std::optional<CompletionRequest> last_request() {
    absl::MutexLock lock(&mu_);
    return last_request_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<CompletionRequest> requests() {  // every Complete call, in arrival order
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  FakeScript& script() { return script_; }  // change only between requests
  // Generations stopped because the consumer went away, and the tokens the last of them had
  // generated by then (-1 before the first).
  int cancellations() const { return cancellations_.load(); }
  int cancelled_after_tokens() const { return cancelled_after_tokens_.load(); }
  // Prefills (FakeScript::prefill_for) stopped by request.cancelled.
  int prefill_cancellations() const { return prefill_cancellations_.load(); }

 private:
  FakeScript script_;
  absl::Mutex mu_;
  std::vector<CompletionRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::optional<CompletionRequest> last_request_;
  int calls_ = 0;
  std::atomic<int> cancellations_{0};
  std::atomic<int> cancelled_after_tokens_{-1};
  std::atomic<int> prefill_cancellations_{0};
};

}  // namespace oscarkv::router::testing

#endif  // OSCARKV_TESTS_SERVICES_ROUTER_FAKE_COMPLETION_BACKEND_H_
