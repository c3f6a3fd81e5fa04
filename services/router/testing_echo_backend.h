// TESTING ONLY. EchoCompletionBackend: a deterministic CompletionBackend without a model, behind
// the hidden router flag --testing_echo_backend, so that the OpenAI-client e2e test
// (tests/services/router/openai_client_test.py) can run the real router binary. Never use it to
// serve users.
//
// Behaviour: one token per prompt byte (token-id prompts are taken as given; ids >= 256 read as
// '?'); chat messages are joined by "\n" (contents only). The output repeats the prompt's
// whitespace-separated words in order, one word per token, separated by single spaces: "Say
// this is a test" with max_tokens 3 gives "Say this is" (finish "length"); with max_tokens >= 5,
// "Say this is a test" (finish "stop"). The echo is certain: with logprobs each token has
// logprob 0 and its only alternative is itself. With `echo`, the prompt comes first, one token
// per byte (the text of a multi-byte character with its last byte), each certain but the first
// (unscored). Model id "oscarkv-echo", context 4096 tokens.
// Thread-safe.
#ifndef OSCARKV_SERVICES_ROUTER_TESTING_ECHO_BACKEND_H_
#define OSCARKV_SERVICES_ROUTER_TESTING_ECHO_BACKEND_H_

#include "services/router/completion_backend.h"

namespace oscarkv::router {

class EchoCompletionBackend final : public CompletionBackend {
 public:
  static constexpr char kModelId[] = "oscarkv-echo";
  static constexpr int kContextLength = 4096;

  std::vector<ModelInfo> Models() const override;
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& model,
                                                const PromptInput& prompt) override;
  absl::StatusOr<CompletionOutcome> Complete(const CompletionRequest& request,
                                             const TokenCallback& on_token) override;
  bool Ready() const override { return true; }
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_TESTING_ECHO_BACKEND_H_
