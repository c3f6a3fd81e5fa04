#include "services/router/openai_api.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace oscarkv::router {
namespace {

using nlohmann::json;

ApiLimits Limits() { return ApiLimits{100, true, {"oscar", "bf16"}}; }

ParseResult Parse(Endpoint e, const json& body, std::string_view session_header = "") {
  return ParseApiRequest(e, "application/json", body.dump(), session_header, Limits());
}

TEST(OpenAiApi, ParsesEveryPromptForm) {
  auto r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", "hi"}});
  ASSERT_FALSE(r.error) << r.error->message;
  EXPECT_EQ(r.request.prompts.at(0).text, "hi");
  r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", {"one"}}});
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.request.prompts.at(0).text, "one");
  r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", {1, 2, 3}}});
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.request.prompts.at(0).token_ids, (std::vector<int32_t>{1, 2, 3}));
  r = Parse(Endpoint::kChatCompletions,
            {{"model", "m"},
             {"messages",
              {{{"role", "system"}, {"content", "be brief"}},
               {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}},
                                               {{"type", "text"}, {"text", "b"}}}}}}}});
  ASSERT_FALSE(r.error) << r.error->message;
  ASSERT_EQ(r.request.prompts.at(0).messages->size(), 2u);
  EXPECT_EQ((*r.request.prompts.at(0).messages)[1].content, "a\nb");  // vLLM joins by "\n"
  // Batched prompts: several strings, or several token-id lists.
  r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", {"a", "b", "c"}}});
  ASSERT_FALSE(r.error) << r.error->message;
  ASSERT_EQ(r.request.prompts.size(), 3u);
  EXPECT_EQ(r.request.prompts[2].text, "c");
  r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", {{1, 2}, {3}}}});
  ASSERT_FALSE(r.error) << r.error->message;
  ASSERT_EQ(r.request.prompts.size(), 2u);
  EXPECT_EQ(r.request.prompts[1].token_ids, std::vector<int32_t>{3});
  for (const json& bad : {json({"a", ""}), json({json("a"), json({1})}), json({json({1}), json::array()}),
                          json({json({1, -2})})}) {
    r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", bad}});
    ASSERT_TRUE(r.error) << bad;
    EXPECT_EQ(r.error->param, "prompt") << bad;
  }
  r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", {1, -2}}});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message, "token id -2 is outside [0, 2147483647]");
  r = Parse(Endpoint::kCompletions,
            {{"model", "m"}, {"prompt", std::vector<std::string>(8, "p")}, {"n", 9}});
  ASSERT_TRUE(r.error);  // 72 choices > 64
  EXPECT_EQ(r.error->param, "n");
}

// max_tokens 0 is the prompt alone, which only completions (with echo) can return; the hint
// that says so is not given where it cannot be followed.
TEST(OpenAiApi, MaxTokensZeroSaysWhenItIsAllowed) {
  auto r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", "x"}, {"max_tokens", 0}});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message, "'max_tokens' must be in [1, 100], got 0 (0 only with echo)");
  r = Parse(Endpoint::kCompletions,
            {{"model", "m"}, {"prompt", "x"}, {"max_tokens", 0}, {"echo", true}});
  ASSERT_FALSE(r.error) << r.error->message;
  EXPECT_EQ(r.request.max_tokens, 0);
  const json user = {{{"role", "user"}, {"content", "hi"}}};
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    r = Parse(Endpoint::kChatCompletions, {{"model", "m"}, {"messages", user}, {field, 0}});
    ASSERT_TRUE(r.error) << field;
    EXPECT_EQ(r.error->message, absl::StrCat("'", field, "' must be in [1, 100], got 0"));
    EXPECT_EQ(r.error->param, field);
  }
}

// Values a client can make large, deep or out of int64's range are named by kind or as written:
// copying them (or recursing through them) into the message is not an option.
TEST(OpenAiApi, ErrorsShowDeepLargeAndHugeValuesSafely) {
  const std::string deep = std::string(60, '[') + std::string(60, ']');
  auto raw = [](const std::string& fields) {
    return ParseApiRequest(Endpoint::kCompletions, "application/json",
                           R"({"model": "m", "prompt": "x", )" + fields + "}", "", Limits());
  };
  for (const char* field : {"n", "logprobs", "min_tokens", "prompt_logprobs", "max_tokens"}) {
    ParseResult r = raw(absl::StrCat("\"", field, "\": ", deep));
    ASSERT_TRUE(r.error) << field;
    EXPECT_EQ(r.error->param, field);
    EXPECT_LT(r.error->message.size(), 200u) << r.error->message;
  }
  // Deeper than kMaxJsonDepth: refused before parsing. A deep value followed by another key
  // made the parser's ordered map copy it recursively, which overflowed the stack (a crash).
  for (const int depth : {kMaxJsonDepth + 1, 70000}) {
    const std::string deeper = std::string(depth, '[') + std::string(depth, ']');
    ParseResult r = raw(R"("x": )" + deeper + R"(, "max_tokens": 1)");
    ASSERT_TRUE(r.error) << depth;
    EXPECT_EQ(r.error->code, "invalid_json");
    EXPECT_EQ(r.error->message, absl::StrCat("The JSON body nests arrays and objects more than ",
                                             kMaxJsonDepth, " levels deep"));
  }
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  ParseResult text = raw(R"("stop": "\"[[[)" + std::string(1000, '{') + R"(", "max_tokens": 1)");
  EXPECT_FALSE(text.error) << text.error->message;
  ParseResult r = raw(R"("logit_bias": {"5": )" + deep + "}");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message,
            "'logit_bias' of token 5 must be a number in [-100, 100], got an array");
  r = raw(R"("n": ")" + std::string(1000, 'z') + R"(")");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message,
            "'n' must be an integer in [1, 16], got \"" + std::string(40, 'z') + "\"...");
  r = raw(R"("max_tokens": 18446744073709551615)");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message, "'max_tokens' must be in [1, 100], got 18446744073709551615");
  r = raw(R"("top_k": 9223372036854775808)");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->message,
            "'top_k' must be -1, 0 (off) or a positive integer, got 9223372036854775808");
  r = raw(R"("prompt_logprobs": 18446744073709551615)");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->param, "prompt_logprobs");
}

// A top_p below the smallest float stays a positive float (the workers read 0 as unset).
TEST(OpenAiApi, TinyTopPStaysPositiveAsAFloat) {
  auto r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", "x"}, {"top_p", 1e-300}});
  ASSERT_FALSE(r.error) << r.error->message;
  EXPECT_GT(static_cast<float>(r.request.top_p), 0.0f);
  r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", "x"}, {"top_p", 0.5}});
  EXPECT_EQ(r.request.top_p, 0.5);
}

TEST(OpenAiApi, ParsesSamplingAndExtensionFields) {
  auto r = Parse(Endpoint::kChatCompletions,
                 {{"model", "m"},
                  {"messages", {{{"role", "user"}, {"content", "x"}}}},
                  {"max_completion_tokens", 7},
                  {"temperature", 0},
                  {"top_p", 0.5},
                  {"seed", 42},
                  {"stop", {"\n", "END"}},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}},
                  {"session_id", "s-1"},
                  {"codec", "bf16"},
                  {"user", "ignored"},
                  {"frequency_penalty", 0.25},
                  {"presence_penalty", -2},
                  {"top_k", 5}});
  ASSERT_FALSE(r.error) << r.error->message;
  const ApiRequest& q = r.request;
  EXPECT_EQ(q.max_tokens, 7);
  EXPECT_EQ(q.temperature, 0);
  EXPECT_EQ(q.top_p, 0.5);
  EXPECT_EQ(q.seed, 42u);
  EXPECT_EQ(q.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(q.stream);
  EXPECT_TRUE(q.include_usage);
  EXPECT_EQ(q.session_id, "s-1");
  EXPECT_EQ(q.codec, "bf16");
  EXPECT_EQ(q.frequency_penalty, 0.25);
  EXPECT_EQ(q.presence_penalty, -2);
  EXPECT_EQ(q.top_k, 5);
  // The header alone also sets the session.
  r = Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", "p"}}, "from-header");
  EXPECT_EQ(r.request.session_id, "from-header");
}

TEST(OpenAiApi, LogprobsFieldsPerEndpoint) {
  const json user = {{{"role", "user"}, {"content", "x"}}};
  auto c = [](json extra) {
    json body = {{"model", "m"}, {"prompt", "p"}};
    if (extra.is_object()) body.update(extra);
    return Parse(Endpoint::kCompletions, body);
  };
  auto chat = [&](json extra) {
    json body = {{"model", "m"}, {"messages", user}};
    if (extra.is_object()) body.update(extra);
    return Parse(Endpoint::kChatCompletions, body);
  };
  EXPECT_EQ(c({}).request.logprobs, -1);
  EXPECT_EQ(c({{"logprobs", nullptr}}).request.logprobs, -1);
  EXPECT_EQ(c({{"logprobs", false}}).request.logprobs, -1);
  EXPECT_EQ(c({{"logprobs", 0}}).request.logprobs, 0);  // the token's own, no alternatives
  EXPECT_EQ(c({{"logprobs", 20}}).request.logprobs, 20);
  for (const json& bad : {json(21), json(-1), json(true), json(1.5)}) {
    auto r = c({{"logprobs", bad}});
    ASSERT_TRUE(r.error) << bad;
    EXPECT_EQ(r.error->param, "logprobs");
  }
  EXPECT_EQ(c({{"top_logprobs", 2}}).error->param, "top_logprobs");
  EXPECT_EQ(chat({}).request.logprobs, -1);
  EXPECT_EQ(chat({{"logprobs", false}, {"top_logprobs", nullptr}}).request.logprobs, -1);
  EXPECT_EQ(chat({{"logprobs", true}}).request.logprobs, 0);
  EXPECT_EQ(chat({{"logprobs", true}, {"top_logprobs", 5}}).request.logprobs, 5);
  EXPECT_EQ(chat({{"logprobs", 3}}).error->param, "logprobs");
  EXPECT_EQ(chat({{"top_logprobs", 5}}).error->param, "top_logprobs");
  EXPECT_EQ(chat({{"logprobs", true}, {"top_logprobs", 21}}).error->param, "top_logprobs");
}

TEST(OpenAiApi, LogprobsBodiesInEachEndpointsShape) {
  ResponseLogprobs lp;
  lp.tokens = {{" Paris", -0.25, {{" Paris", -0.25}, {" London", -4.5}, {"\xc2", -INFINITY}}},
               {".", -0.5, {}}};
  lp.text_offsets = {0, 6};
  ResponseMeta meta{Endpoint::kCompletions, "cmpl-1", 1, "m", ""};
  json j = json::parse(CompletionBody(meta, " Paris.", FinishReason::kLength, {3, 2}, &lp));
  const json& c = j["choices"][0]["logprobs"];
  EXPECT_EQ(c["tokens"], json({" Paris", "."}));
  EXPECT_EQ(c["token_logprobs"], json({-0.25, -0.5}));
  EXPECT_EQ(c["text_offset"], json({0, 6}));
  EXPECT_EQ(c["top_logprobs"][0][" London"], -4.5);
  EXPECT_EQ(c["top_logprobs"][0]["\xef\xbf\xbd"], -9999.0);  // U+FFFD; no infinity in JSON
  // The chosen token is always listed, as the legacy API does (logprobs 0: it alone).
  EXPECT_EQ(c["top_logprobs"][1], json({{".", -0.5}}));
  EXPECT_EQ(c["top_logprobs"][0].size(), 3u) << "' Paris' is chosen and the most likely";
  // The alternatives keep their order (most likely first) in the text.
  const std::string body = CompletionBody(meta, " Paris.", FinishReason::kLength, {3, 2}, &lp);
  EXPECT_LT(body.find("\" Paris\":-0.25"), body.find("\" London\""));
  EXPECT_TRUE(json::parse(CompletionBody(meta, "x", FinishReason::kStop, {1, 1}))["choices"][0]
                  ["logprobs"].is_null());
  lp.tokens[1].piece = "!";  // chosen, not among the alternatives: listed after them
  lp.tokens[1].top = {{".", -0.5}};
  lp.tokens[1].logprob = -2;
  j = json::parse(CompletionBody(meta, " Paris!", FinishReason::kLength, {3, 2}, &lp));
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1], json({{".", -0.5}, {"!", -2}}));

  meta.endpoint = Endpoint::kChatCompletions;
  j = json::parse(StreamTextEvent(meta, " Paris", &lp).substr(6));
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], " Paris");
  EXPECT_EQ(content[0]["bytes"], json({32, 80, 97, 114, 105, 115}));
  EXPECT_EQ(content[0]["top_logprobs"][2]["bytes"], json({0xc2}));
  EXPECT_EQ(content[0]["top_logprobs"][2]["logprob"], -9999.0);
  EXPECT_TRUE(j["choices"][0]["logprobs"]["refusal"].is_null());

  // vLLM's return_tokens_as_token_ids names tokens by id; bytes stay the piece's.
  lp.tokens[0].token_id = 6342;
  lp.tokens[0].top[1].token_id = 3841;
  lp.tokens_as_ids = true;
  j = json::parse(StreamTextEvent(meta, " Paris", &lp).substr(6));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "token_id:6342");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "token_id:3841");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"], json({32, 80, 97, 114, 105, 115}));
  meta.endpoint = Endpoint::kCompletions;
  j = json::parse(CompletionBody(meta, " Paris.", FinishReason::kLength, {3, 2}, &lp));
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"][0], "token_id:6342");
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0]["token_id:3841"], -4.5);
  EXPECT_TRUE(Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", "p"},
                                             {"return_tokens_as_token_ids", true}})
                  .request.return_tokens_as_token_ids);
  EXPECT_EQ(Parse(Endpoint::kCompletions, {{"model", "m"}, {"prompt", "p"},
                                           {"return_tokens_as_token_ids", 1}})
                .error->param,
            "return_tokens_as_token_ids");
}

// Chat's max_completion_tokens replaces the deprecated max_tokens; both are checked.
TEST(OpenAiApi, MaxCompletionTokensWinsOverMaxTokens) {
  const json user = {{{"role", "user"}, {"content", "hi"}}};
  auto r = Parse(Endpoint::kChatCompletions, {{"model", "m"}, {"messages", user},
                                              {"max_tokens", 3}, {"max_completion_tokens", 6}});
  ASSERT_FALSE(r.error) << r.error->message;
  EXPECT_EQ(r.request.max_tokens, 6);
  r = Parse(Endpoint::kChatCompletions,
            {{"model", "m"}, {"messages", user}, {"max_tokens", 2}, {"max_completion_tokens", "x"}});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->param, "max_completion_tokens");
}

// OpenAI's shapes: a chat message carries "refusal": null; with include_usage every chunk but
// the usage one carries "usage": null.
TEST(OpenAiApi, ChatMessageRefusalAndStreamUsageNull) {
  ResponseMeta meta{Endpoint::kChatCompletions, "chatcmpl-1", 1, "m", ""};
  json j = json::parse(CompletionBody(meta, "hi", FinishReason::kStop, {1, 1}));
  EXPECT_TRUE(j["choices"][0]["message"].contains("refusal"));
  EXPECT_TRUE(j["choices"][0]["message"]["refusal"].is_null());
  EXPECT_FALSE(json::parse(StreamTextEvent(meta, "hi", nullptr).substr(6)).contains("usage"));
  meta.stream_usage = true;
  for (const std::string& event : {StreamRoleEvent(meta), StreamTextEvent(meta, "hi", nullptr),
                                    StreamFinishEvent(meta, FinishReason::kStop)}) {
    j = json::parse(event.substr(6));
    ASSERT_TRUE(j.contains("usage")) << event;
    EXPECT_TRUE(j["usage"].is_null()) << event;
  }
  j = json::parse(StreamUsageEvent(meta, {3, 2}).substr(6));
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

TEST(OpenAiApi, ContentTypeWithCharsetIsAccepted) {
  auto r = ParseApiRequest(Endpoint::kCompletions, "Application/JSON; charset=utf-8",
                           R"({"model":"m","prompt":"p"})", "", Limits());
  EXPECT_FALSE(r.error);
  r = ParseApiRequest(Endpoint::kCompletions, "text/plain", R"({"model":"m","prompt":"p"})", "",
                      Limits());
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->http_status, 415);
}

TEST(OpenAiApi, ErrorBodyHasOpenAiShape) {
  const json j = json::parse(ApiErrorBody(ApiError{400, "bad", "invalid_request_error", "", "x"}));
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "x");
}

TEST(OpenAiApi, StatusMapping) {
  EXPECT_EQ(ApiErrorFromStatus(absl::InvalidArgumentError("")).http_status, 400);
  EXPECT_EQ(ApiErrorFromStatus(absl::NotFoundError("")).http_status, 404);
  EXPECT_EQ(ApiErrorFromStatus(absl::ResourceExhaustedError("")).http_status, 429);
  EXPECT_EQ(ApiErrorFromStatus(absl::UnavailableError("")).http_status, 503);
  EXPECT_EQ(ApiErrorFromStatus(absl::DeadlineExceededError("")).http_status, 504);
  EXPECT_EQ(ApiErrorFromStatus(absl::InternalError("")).http_status, 500);
}

TEST(OpenAiApi, InvalidUtf8FromABackendDoesNotBreakTheStream) {
  ResponseMeta meta{Endpoint::kCompletions, "cmpl-1", 1, "m", ""};
  const std::string event = StreamTextEvent(meta, std::string("\xff\xfe", 2));
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  EXPECT_NO_THROW(json::parse(event.substr(6)));
}

}  // namespace
}  // namespace oscarkv::router
