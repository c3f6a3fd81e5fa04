// HTTP-level tests: a real RouterServer on a loopback port with a FakeCompletionBackend, driven
// by a real HTTP client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/router/request_tracker.h"
#include "services/router/router_server.h"
#include "tests/services/router/fake_completion_backend.h"
#include "tests/testing/hang_up_client.h"

namespace oscarkv::router {
namespace {

using nlohmann::json;
using testing::FakeCompletionBackend;
using testing::FakeScript;
using ::oscarkv::testing::PostThenHangUp;

class RouterHttpTest : public ::testing::Test {
 protected:
  void Start(FakeScript script = {}, RouterConfig config = {}) {
    config.http_host = "127.0.0.1";
    config.http_port = 0;
    config.grpc_address = "127.0.0.1:0";
    config.max_tokens_limit = 100;
    config.default_max_tokens = 16;
    if (config.drain_timeout_s == RouterConfig{}.drain_timeout_s) config.drain_timeout_s = 5;
    backend_ = std::make_shared<FakeCompletionBackend>(std::move(script));
    auto server = RouterServer::Create(config, backend_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    client_->set_read_timeout(10, 0);
  }

  httplib::Result Post(const std::string& path, const json& body,
                       const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body.dump(), "application/json");
  }

  // Checks the error shape and returns error.{type,param,code} for comparisons.
  static json ExpectError(const httplib::Result& res, int status) {
    EXPECT_TRUE(res) << "no response";
    if (!res) return {};
    EXPECT_EQ(res->status, status) << res->body;
    const json j = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << res->body;
    if (!j.is_object() || !j.contains("error")) return {};
    const json& e = j["error"];
    for (const char* k : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(e.contains(k)) << "missing error." << k << " in " << res->body;
    }
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    return e;
  }

  // Parses an SSE body: every event is "data: <payload>\n\n"; returns the payloads.
  static std::vector<std::string> SseEvents(const std::string& body) {
    std::vector<std::string> events;
    EXPECT_TRUE(body.size() >= 2 && body.substr(body.size() - 2) == "\n\n") << body;
    for (absl::string_view block : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
      EXPECT_EQ(block.substr(0, 6), "data: ") << block;
      EXPECT_EQ(block.find('\n'), absl::string_view::npos) << "one line per event: " << block;
      events.emplace_back(block.substr(6));
    }
    return events;
  }

  // Streams a completions `body` (without prompt_logprobs, which streaming refuses) and joins
  // each choice's text and finish reasons.
  struct StreamedChoices {
    std::vector<std::string> text;
    std::vector<std::string> finish;
  };
  StreamedChoices StreamChoices(json body, int choices) {
    body.erase("prompt_logprobs");
    body["stream"] = true;
    StreamedChoices out{std::vector<std::string>(choices), std::vector<std::string>(choices)};
    auto res = Post("/v1/completions", body);
    EXPECT_TRUE(res) << "no response";
    if (!res) return out;
    EXPECT_EQ(res->status, 200) << res->body;
    for (const std::string& e : SseEvents(res->body)) {
      if (e == "[DONE]") continue;
      const json chunk = json::parse(e);
      for (const json& c : chunk["choices"]) {
        const int index = c["index"].get<int>();
        out.text.at(index) += c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) {
          out.finish.at(index) += c["finish_reason"].get<std::string>();
        }
      }
    }
    return out;
  }

  void ExpectAllFinished() {
    // The handler records the end before the last byte leaves; allow the stream to settle.
    for (int i = 0; i < 200 && server_->tracker().InFlight() > 0; ++i) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(server_->tracker().InFlight(), 0u) << "every request must end";
  }

  std::shared_ptr<FakeCompletionBackend> backend_;
  std::unique_ptr<RouterServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(RouterHttpTest, ListsModels) {
  Start();
  auto res = client_->Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "fake-model");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["owned_by"], "oscarkv");
  EXPECT_EQ(j["data"][0]["max_model_len"], 64);
}

// GET /v1/models/{id}: the listed model object, or 404 model_not_found.
TEST_F(RouterHttpTest, RetrievesOneModel) {
  Start();
  auto res = client_->Get("/v1/models/fake-model");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const json j = json::parse(res->body);
  EXPECT_EQ(j["id"], "fake-model");
  EXPECT_EQ(j["object"], "model");
  EXPECT_EQ(j["max_model_len"], 64);
  const json e = ExpectError(client_->Get("/v1/models/other"), 404);
  EXPECT_EQ(e["code"], "model_not_found");
}

// A second server on a port in use fails to start instead of sharing the port (httplib's
// default SO_REUSEPORT would let both listen and split the clients).
TEST_F(RouterHttpTest, APortInUseIsRefused) {
  Start();
  RouterConfig config;
  config.http_host = "127.0.0.1";
  config.http_port = server_->http_port();
  config.grpc_address = "";
  auto second = RouterServer::Create(config, backend_);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("port in use"), std::string::npos)
      << second.status();
}

TEST_F(RouterHttpTest, ServedModelNameRenamesTheModel) {
  RouterConfig c;
  c.served_model_name = "my-model";
  Start({}, c);
  EXPECT_EQ(json::parse(client_->Get("/v1/models")->body)["data"][0]["id"], "my-model");
  auto ok = Post("/v1/completions", {{"model", "my-model"}, {"prompt", "hi"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["model"], "my-model");
  ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "hi"}}), 404);
}

TEST_F(RouterHttpTest, CompletionNonStreamingShape) {
  Start();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "abcde"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const json j = json::parse(res->body);
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "Hello, world!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);  // one token per byte in the fake
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
  // Defaults reach the backend.
  const CompletionRequest req = *backend_->last_request();
  EXPECT_EQ(req.max_tokens, 16);
  EXPECT_EQ(req.codec, "oscar");
  EXPECT_EQ(req.prompt_token_ids, (std::vector<int32_t>{'a', 'b', 'c', 'd', 'e'}));
  EXPECT_EQ(req.request_id, j["id"]);
  ExpectAllFinished();
  EXPECT_EQ(server_->tracker().FinishedCount(RequestState::kDone), 1);
}

TEST_F(RouterHttpTest, MaxTokensCutsWithFinishReasonLength) {
  Start();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"max_tokens", 2}});
  ASSERT_TRUE(res);
  const json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "Hello,");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
}

// echo: the prompt's text and tokens come first (its first token unscored: null logprobs),
// text offsets run over both, and usage counts only the generated tokens; max_tokens 0 gives
// the prompt alone. Streamed, the prompt's tokens are events before the completion's.
TEST_F(RouterHttpTest, EchoPutsThePromptBeforeTheCompletion) {
  Start();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "ab"}, {"echo", true},
                                      {"max_tokens", 2}, {"logprobs", 1}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["text"], "abHello,");
  EXPECT_EQ(choice["finish_reason"], "length");
  const json& lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "Hello", ","}));
  EXPECT_EQ(lp["token_logprobs"][0], nullptr);
  EXPECT_EQ(lp["top_logprobs"][0], nullptr);
  EXPECT_EQ(lp["token_logprobs"][1], -0.5);
  EXPECT_EQ(lp["top_logprobs"][1], json({{"b", -0.5}}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 7}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_TRUE(backend_->last_request()->echo);

  res = Post("/v1/completions",
             {{"model", "fake-model"}, {"prompt", "ab"}, {"echo", true}, {"max_tokens", 0}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  EXPECT_EQ(backend_->last_request()->max_tokens, 0);

  res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "ab"}, {"echo", true},
                                 {"max_tokens", 1}, {"stream", true}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::string text;
  for (const std::string& e : SseEvents(res->body)) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    if (!chunk["choices"].empty()) text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "abHello");
  ExpectAllFinished();
}

// vLLM's prompt_logprobs: per prompt token null (the first) or {"<id>": {logprob, rank,
// decoded_token}} with the token first, its own count of alternatives apart from echo's;
// per choice on completions, at the top on chat; not with stream.
TEST_F(RouterHttpTest, PromptLogprobsInVllmsShape) {
  Start();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "ab"}, {"echo", true},
                                      {"max_tokens", 1}, {"logprobs", 1}, {"prompt_logprobs", 2}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["prompt_logprobs"],
            json::parse(R"([null, {"98": {"logprob": -0.5, "rank": 1, "decoded_token": "b"},
                                   "999": {"logprob": -1.5, "rank": 2, "decoded_token": "?"}}])"));
  EXPECT_EQ(choice["logprobs"]["top_logprobs"][1], json({{"b", -0.5}}));  // echo's: 1 alternative
  EXPECT_EQ(backend_->last_request()->prompt_logprobs, 2);

  res = Post("/v1/chat/completions", {{"model", "fake-model"}, {"max_tokens", 1},
                                      {"messages", {{{"role", "user"}, {"content", "x"}}}},
                                      {"prompt_logprobs", 0}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  const json& prompt = j["prompt_logprobs"];
  ASSERT_EQ(prompt.size(), std::string("user:x\n").size());
  EXPECT_EQ(prompt[0], nullptr);
  EXPECT_EQ(prompt[1], json::parse(R"({"115": {"logprob": -0.5, "rank": 1, "decoded_token": "s"}})"));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");  // no echo in the text
  EXPECT_FALSE(j["choices"][0].contains("prompt_logprobs"));

  const json e = ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "ab"},
                                                     {"prompt_logprobs", 1}, {"stream", true}}),
                             400);
  EXPECT_EQ(e["param"], "prompt_logprobs");
  EXPECT_EQ(e["code"], "unsupported_value");
  ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "ab"},
                                       {"prompt_logprobs", 21}}),
              400);
  ExpectAllFinished();
}

TEST_F(RouterHttpTest, ChatNonStreamingShape) {
  Start();
  auto res = Post("/v1/chat/completions",
                  {{"model", "fake-model"},
                   {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, world!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 8);  // "user:hi\n"
}

TEST_F(RouterHttpTest, CompletionStreamingFormat) {
  Start();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"stream", true}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = SseEvents(res->body);
  ASSERT_EQ(events.size(), 6u) << res->body;  // 4 tokens, finish, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text, id;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json j = json::parse(events[i]);
    EXPECT_EQ(j["object"], "text_completion");
    if (id.empty()) id = j["id"];
    EXPECT_EQ(j["id"], id) << "one id for the whole stream";
    ASSERT_EQ(j["choices"].size(), 1u);
    text += j["choices"][0]["text"].get<std::string>();
    if (i + 2 < events.size()) {
      EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
    } else {
      EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
      EXPECT_EQ(j["choices"][0]["text"], "");
    }
  }
  EXPECT_EQ(text, "Hello, world!");
  ExpectAllFinished();
}

// n > 1: one backend call per choice (choice 0 first, the rest once it has a token), each with
// its own request id and seed; the choices come back indexed and the usage adds them up.
TEST_F(RouterHttpTest, NChoicesRunSeparatelyAndComeBackIndexed) {
  Start();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"n", 3},
                                      {"best_of", 3}, {"seed", 5}, {"max_tokens", 2}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "Hello,");
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 1);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  const std::vector<CompletionRequest> calls = backend_->requests();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].seed, 5u);  // choice 0 keeps the client's seed
  std::set<std::string> ids;
  std::set<uint64_t> seeds;
  for (const CompletionRequest& r : calls) {
    ids.insert(r.request_id);
    seeds.insert(r.seed.value());
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(seeds.size(), 3u);

  // Streaming chat: a role delta per choice, each choice's deltas and finish, one usage.
  res = Post("/v1/chat/completions", {{"model", "fake-model"},
                                      {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                      {"n", 2}, {"stream", true},
                                      {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::vector<std::string> text(2);
  std::vector<int> roles(2, 0), finishes(2, 0);
  int usage_events = 0;
  for (const std::string& e : SseEvents(res->body)) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    if (chunk["choices"].empty()) {
      ++usage_events;
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 8);
      continue;
    }
    const json& c = chunk["choices"][0];
    const int index = c["index"].get<int>();
    ASSERT_TRUE(index == 0 || index == 1) << e;
    if (c["delta"].contains("role")) ++roles[index];
    if (c["delta"].contains("content")) text[index] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) {
      ++finishes[index];
      EXPECT_EQ(c["finish_reason"], "stop");
    }
  }
  EXPECT_EQ(text, (std::vector<std::string>{"Hello, world!", "Hello, world!"}));
  EXPECT_EQ(roles, (std::vector<int>{1, 1}));
  EXPECT_EQ(finishes, (std::vector<int>{1, 1}));
  EXPECT_EQ(usage_events, 1);
  ExpectAllFinished();
}

// n > 1 with the prompt scored (echo + logprobs, prompt_logprobs): the prompt is scored once, by
// choice 0's call; the other choices get its tokens and scores, streamed or not, and their own
// calls neither echo nor score (so their prefills may reuse the stored prompt).
TEST_F(RouterHttpTest, NChoicesScoreThePromptOnce) {
  Start();
  const json body = {{"model", "fake-model"}, {"prompt", "ab"}, {"n", 3}, {"echo", true},
                     {"logprobs", 1}, {"prompt_logprobs", 1}, {"max_tokens", 2}};
  auto res = Post("/v1/completions", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const json& c = j["choices"][i];
    EXPECT_EQ(c["text"], "abHello,") << i;
    EXPECT_EQ(c["logprobs"], j["choices"][0]["logprobs"]) << i;
    EXPECT_EQ(c["logprobs"]["token_logprobs"][1], -0.5) << i;
    EXPECT_EQ(c["logprobs"]["text_offset"], json({0, 1, 2, 7})) << i;
    EXPECT_EQ(c["prompt_logprobs"], j["choices"][0]["prompt_logprobs"]) << i;
    EXPECT_EQ(c["prompt_logprobs"].size(), 2u) << i;
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  std::vector<CompletionRequest> calls = backend_->requests();
  ASSERT_EQ(calls.size(), 3u);
  int scored = 0;
  for (const CompletionRequest& r : calls) {
    scored += PromptScoreAlternatives(r) >= 0;
    EXPECT_EQ(r.echo, r.request_id == calls[0].request_id) << r.request_id;
    EXPECT_EQ(r.logprobs, 1);  // generated tokens still scored per choice
  }
  EXPECT_EQ(scored, 1);

  // Streamed (echo + logprobs): every choice's events start with the prompt's two tokens.
  EXPECT_EQ(StreamChoices(body, 3).text, (std::vector<std::string>(3, "abHello,")));
  calls = backend_->requests();
  ASSERT_EQ(calls.size(), 6u);
  scored = 0;
  for (size_t k = 3; k < calls.size(); ++k) scored += PromptScoreAlternatives(calls[k]) >= 0;
  EXPECT_EQ(scored, 1);

  // max_tokens 0 (the prompt alone): the later choices would say exactly what choice 0 says;
  // they never run, and repeat its prompt tokens, scores and finish reason, streamed or not.
  json only_prompt = body;
  only_prompt["max_tokens"] = 0;
  res = Post("/v1/completions", only_prompt);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json k = json::parse(res->body);
  ASSERT_EQ(k["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const json& c = k["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["text"], "ab") << i;
    EXPECT_EQ(c["logprobs"]["text_offset"], json({0, 1})) << i;
    EXPECT_EQ(c["logprobs"], k["choices"][0]["logprobs"]) << i;
    EXPECT_EQ(c["prompt_logprobs"], k["choices"][0]["prompt_logprobs"]) << i;
    EXPECT_EQ(c["prompt_logprobs"].size(), 2u) << i;
    EXPECT_EQ(c["finish_reason"], "length") << i;
  }
  EXPECT_EQ(k["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(k["usage"]["completion_tokens"], 0);
  EXPECT_EQ(backend_->requests().size(), 7u) << "only choice 0 runs";

  const StreamedChoices streamed = StreamChoices(only_prompt, 3);
  EXPECT_EQ(streamed.text, (std::vector<std::string>(3, "ab")));
  EXPECT_EQ(streamed.finish, (std::vector<std::string>(3, "length")));  // one finish each
  EXPECT_EQ(backend_->requests().size(), 8u) << "only choice 0 runs";
  ExpectAllFinished();
}

// Batched prompts: choice i * n + j is prompt i's j-th; usage adds the prompts' tokens.
TEST_F(RouterHttpTest, BatchedPromptsGiveOneChoiceEachInOrder) {
  Start();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", {"ab", "cde"}},
                                      {"n", 2}, {"max_tokens", 1}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  std::multiset<size_t> prompt_lengths;
  for (const CompletionRequest& r : backend_->requests()) {
    prompt_lengths.insert(r.prompt_token_ids.size());
  }
  EXPECT_EQ(prompt_lengths, (std::multiset<size_t>{2, 2, 3, 3}));
  ExpectAllFinished();
}

// A choice that fails fails the request (and the others stop).
TEST_F(RouterHttpTest, AFailingChoiceFailsTheRequest) {
  FakeScript script;
  script.fail_after_tokens = 2;
  Start(script);
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"n", 2}});
  ExpectError(res, 500);
  ExpectAllFinished();
}

// What means nothing passes: empty tools, tool_choice "none" (with tools), response_format text.
TEST_F(RouterHttpTest, NoOpToolAndFormatFieldsAreAccepted) {
  Start();
  const json user = {{{"role", "user"}, {"content", "hi"}}};
  const json tools = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
  for (const json& extra : {json{{"tools", json::array()}},
                            json{{"tools", tools}, {"tool_choice", "none"}},
                            json{{"tool_choice", "auto"}},
                            json{{"response_format", {{"type", "text"}}}}}) {
    json body = {{"model", "fake-model"}, {"messages", user}};
    body.update(extra);
    auto res = Post("/v1/chat/completions", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << extra << ": " << res->body;
  }
}

TEST_F(RouterHttpTest, ChatStreamingFormatWithUsage) {
  Start();
  auto res = Post("/v1/chat/completions",
                  {{"model", "fake-model"},
                   {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                   {"max_tokens", 3},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::vector<std::string> events = SseEvents(res->body);
  // role, 3 content deltas, finish, usage, [DONE]
  ASSERT_EQ(events.size(), 7u) << res->body;
  const json role = json::parse(events[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  std::string text;
  for (int i = 1; i <= 3; ++i) {
    const json j = json::parse(events[i]);
    EXPECT_FALSE(j["choices"][0]["delta"].contains("role"));
    text += j["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello, world");
  const json fin = json::parse(events[4]);
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  const json usage = json::parse(events[5]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 8);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["total_tokens"], 11);
  EXPECT_EQ(events[6], "[DONE]");
}

TEST_F(RouterHttpTest, ExtensionFieldsReachTheBackend) {
  Start();
  auto res = Post("/v1/completions",
                  {{"model", "fake-model"}, {"prompt", "x"}, {"codec", "oscar-gram"},
                   {"temperature", 0}, {"top_p", 0.9}, {"seed", 5}, {"stop", "\n"},
                   {"top_k", 40}, {"presence_penalty", 0.5}, {"frequency_penalty", -1.25},
                   {"logit_bias", {{"7", -100}, {"3", 2.5}}}, {"ignore_eos", true},
                   {"min_tokens", 2}, {"stop_token_ids", {7, 9}}},
                  {{"X-Session-Id", "agent-42"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["session_id"], "agent-42");
  const CompletionRequest req = *backend_->last_request();
  EXPECT_EQ(req.session_id, "agent-42");
  EXPECT_EQ(req.codec, "oscar-gram");
  EXPECT_EQ(req.temperature, 0);
  EXPECT_EQ(req.top_p, 0.9);
  EXPECT_EQ(req.seed, 5u);
  EXPECT_EQ(req.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(req.top_k, 40);
  EXPECT_EQ(req.presence_penalty, 0.5);
  EXPECT_EQ(req.frequency_penalty, -1.25);
  EXPECT_EQ(req.logit_bias, (std::vector<std::pair<int32_t, double>>{{3, 2.5}, {7, -100}}));
  EXPECT_TRUE(req.ignore_eos);
  EXPECT_EQ(req.min_tokens, 2);
  EXPECT_EQ(req.stop_token_ids, (std::vector<int32_t>{7, 9}));
  res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"top_k", -1}});
  EXPECT_EQ(backend_->last_request()->top_k, 0);  // vLLM's "off"
  res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"session_id", "s2"}});
  EXPECT_EQ(backend_->last_request()->session_id, "s2");
}

struct BadCase {
  std::string name;
  std::string path;
  json body;
  int status;
  std::string param;  // "" → null
  std::string code;   // "" → null
};

TEST_F(RouterHttpTest, EveryInvalidRequestGetsAClear4xx) {
  Start();
  const json user = {{{"role", "user"}, {"content", "hi"}}};
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  const std::string long_prompt(64, 'a');  // context is 64 tokens
  const std::vector<BadCase> cases = {
      {"unknown model", c, {{"model", "gpt-9"}, {"prompt", "x"}}, 404, "model", "model_not_found"},
      {"missing model", c, {{"prompt", "x"}}, 400, "model", ""},
      {"missing prompt", c, {{"model", "fake-model"}}, 400, "prompt", ""},
      {"prompt wrong type", c, {{"model", "fake-model"}, {"prompt", 5}}, 400, "prompt", ""},
      {"empty prompt", c, {{"model", "fake-model"}, {"prompt", ""}}, 400, "prompt", ""},
      {"batched prompts with an empty one", c,
       {{"model", "fake-model"}, {"prompt", {"a", ""}}}, 400, "prompt", ""},
      {"batched prompt too long", c,
       {{"model", "fake-model"}, {"prompt", {"a", std::string(64, 'a')}}}, 400, "prompt",
       "context_length_exceeded"},
      {"token outside vocabulary", c, {{"model", "fake-model"}, {"prompt", {1, 5000}}}, 400,
       "prompt", ""},
      {"logit_bias token outside vocabulary", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"logit_bias", {{"1000", 1}}}}, 400,
       "logit_bias", ""},
      {"stop token outside vocabulary", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"stop_token_ids", {5, 1000}}}, 400,
       "stop_token_ids", ""},
      {"echo scoring a prompt that fills the context", c,
       {{"model", "fake-model"}, {"prompt", long_prompt}, {"max_tokens", 0}, {"echo", true}},
       400, "prompt", "context_length_exceeded"},
      {"missing messages", chat, {{"model", "fake-model"}}, 400, "messages", ""},
      {"empty messages", chat, {{"model", "fake-model"}, {"messages", json::array()}}, 400,
       "messages", ""},
      {"bad role", chat, {{"model", "fake-model"}, {"messages", {{{"role", "robot"}, {"content", "x"}}}}},
       400, "messages[0].role", ""},
      {"missing content", chat, {{"model", "fake-model"}, {"messages", {{{"role", "user"}}}}}, 400,
       "messages[0].content", ""},
      {"max_tokens zero", c, {{"model", "fake-model"}, {"prompt", "x"}, {"max_tokens", 0}}, 400,
       "max_tokens", ""},
      {"max_tokens above limit", c, {{"model", "fake-model"}, {"prompt", "x"}, {"max_tokens", 101}},
       400, "max_tokens", ""},
      {"max_tokens not integer", c, {{"model", "fake-model"}, {"prompt", "x"}, {"max_tokens", "10"}},
       400, "max_tokens", ""},
      {"temperature too high", chat, {{"model", "fake-model"}, {"messages", user}, {"temperature", 2.5}},
       400, "temperature", ""},
      {"temperature negative", c, {{"model", "fake-model"}, {"prompt", "x"}, {"temperature", -0.1}},
       400, "temperature", ""},
      {"top_p zero", c, {{"model", "fake-model"}, {"prompt", "x"}, {"top_p", 0}}, 400, "top_p", ""},
      {"top_p above one", c, {{"model", "fake-model"}, {"prompt", "x"}, {"top_p", 1.01}}, 400,
       "top_p", ""},
      {"presence_penalty above 2", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"presence_penalty", 2.5}}, 400,
       "presence_penalty", ""},
      {"frequency_penalty below -2", chat,
       {{"model", "fake-model"}, {"messages", user}, {"frequency_penalty", -3}}, 400,
       "frequency_penalty", ""},
      {"frequency_penalty not a number", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"frequency_penalty", "high"}}, 400,
       "frequency_penalty", ""},
      {"logit_bias not an object", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"logit_bias", {1, 2}}}, 400, "logit_bias", ""},
      {"logit_bias key not a token id", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"logit_bias", {{"the", 1}}}}, 400,
       "logit_bias", ""},
      {"logit_bias above 100", chat,
       {{"model", "fake-model"}, {"messages", user}, {"logit_bias", {{"5", 101}}}}, 400,
       "logit_bias", ""},
      {"min_tokens above max_tokens", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"max_tokens", 3}, {"min_tokens", 4}}, 400,
       "min_tokens", ""},
      {"min_tokens negative", c, {{"model", "fake-model"}, {"prompt", "x"}, {"min_tokens", -1}},
       400, "min_tokens", ""},
      {"stop_token_ids not ids", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"stop_token_ids", {1, -2}}}, 400,
       "stop_token_ids", ""},
      {"ignore_eos not bool", c, {{"model", "fake-model"}, {"prompt", "x"}, {"ignore_eos", 1}},
       400, "ignore_eos", ""},
      {"tools", chat,
       {{"model", "fake-model"}, {"messages", user},
        {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}},
       400, "tools", "unsupported_value"},
      {"tool_choice required", chat,
       {{"model", "fake-model"}, {"messages", user}, {"tool_choice", "required"}}, 400,
       "tool_choice", "unsupported_value"},
      {"functions", chat,
       {{"model", "fake-model"}, {"messages", user}, {"functions", {{{"name", "f"}}}}}, 400,
       "functions", "unsupported_value"},
      {"suffix", c, {{"model", "fake-model"}, {"prompt", "x"}, {"suffix", "end"}}, 400, "suffix",
       "unsupported_value"},
      {"response_format json", chat,
       {{"model", "fake-model"}, {"messages", user},
        {"response_format", {{"type", "json_object"}}}},
       400, "response_format", "unsupported_value"},
      {"top_k below -1", c, {{"model", "fake-model"}, {"prompt", "x"}, {"top_k", -2}}, 400,
       "top_k", ""},
      {"top_k not integer", c, {{"model", "fake-model"}, {"prompt", "x"}, {"top_k", 1.5}}, 400,
       "top_k", ""},
      {"n above 16", chat, {{"model", "fake-model"}, {"messages", user}, {"n", 17}}, 400, "n", ""},
      {"best_of above n", c, {{"model", "fake-model"}, {"prompt", "x"}, {"best_of", 2}}, 400,
       "best_of", "unsupported_value"},
      {"stream not bool", c, {{"model", "fake-model"}, {"prompt", "x"}, {"stream", "yes"}}, 400,
       "stream", ""},
      {"too many stops", c,
       {{"model", "fake-model"}, {"prompt", "x"}, {"stop", {"a", "b", "c", "d", "e"}}}, 400, "stop", ""},
      {"echo on chat", chat, {{"model", "fake-model"}, {"messages", user}, {"echo", true}}, 400,
       "echo", "unsupported_value"},
      {"echo not bool", c, {{"model", "fake-model"}, {"prompt", "x"}, {"echo", 1}}, 400, "echo",
       ""},
      {"max_tokens 0 without echo", c, {{"model", "fake-model"}, {"prompt", "x"}, {"max_tokens", 0}},
       400, "max_tokens", ""},
      {"max_completion_tokens 0", chat,
       {{"model", "fake-model"}, {"messages", user}, {"max_completion_tokens", 0}}, 400,
       "max_completion_tokens", ""},
      {"prompt fills the context", c, {{"model", "fake-model"}, {"prompt", long_prompt}}, 400,
       "prompt", "context_length_exceeded"},
      {"prompt + max_tokens over the context", c,
       {{"model", "fake-model"}, {"prompt", std::string(60, 'a')}, {"max_tokens", 5}}, 400,
       "max_tokens", "context_length_exceeded"},
      {"unknown codec", c, {{"model", "fake-model"}, {"prompt", "x"}, {"codec", "int3"}}, 400,
       "codec", ""},
      {"session_id not string", c, {{"model", "fake-model"}, {"prompt", "x"}, {"session_id", 7}},
       400, "session_id", ""},
      {"body not an object", c, json::array({1, 2}), 400, "", "invalid_json"},
  };
  for (const BadCase& bc : cases) {
    SCOPED_TRACE(bc.name);
    const json e = ExpectError(Post(bc.path, bc.body), bc.status);
    if (e.is_null()) continue;
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], bc.param.empty() ? json(nullptr) : json(bc.param));
    EXPECT_EQ(e["code"], bc.code.empty() ? json(nullptr) : json(bc.code));
  }
  // Malformed JSON and wrong content type need raw bodies.
  json e = ExpectError(client_->Post("/v1/completions", "{\"model\": ", "application/json"), 400);
  EXPECT_EQ(e["code"], "invalid_json");
  e = ExpectError(client_->Post("/v1/completions", R"({"model":"fake-model","prompt":"x"})",
                                "text/plain"),
                  415);
  EXPECT_EQ(e["code"], "unsupported_media_type");
  // Header and body sessions disagree.
  e = ExpectError(Post(c, {{"model", "fake-model"}, {"prompt", "x"}, {"session_id", "a"}},
                       {{"X-Session-Id", "b"}}),
                  400);
  EXPECT_EQ(e["param"], "session_id");
  // Unknown route: 404 in the same shape; a known path with another method: 405 naming the one
  // it takes.
  ExpectError(client_->Get("/v1/embeddings"), 404);
  auto wrong_method = client_->Get("/v1/completions");
  e = ExpectError(wrong_method, 405);
  EXPECT_EQ(e["code"], "method_not_allowed");
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  wrong_method = client_->Post("/v1/models", "{}", "application/json");
  ExpectError(wrong_method, 405);
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "GET");
  EXPECT_EQ(backend_->calls(), 0) << "no rejected request reaches the backend";
  EXPECT_EQ(server_->tracker().InFlight(), 0u);
}

TEST_F(RouterHttpTest, CodecOverrideCanBeDisabled) {
  RouterConfig c;
  c.allow_codec_override = false;
  Start({}, c);
  const json e =
      ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"codec", "bf16"}}), 400);
  EXPECT_EQ(e["param"], "codec");
}

TEST_F(RouterHttpTest, BackendErrorsMapToStatusCodes) {
  FakeScript s;
  s.fail_before_first = absl::UnavailableError("no healthy decode worker is registered");
  Start(s);
  json e = ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}}), 503);
  EXPECT_EQ(e["message"], "no healthy decode worker is registered");
  backend_->script().fail_before_first = absl::ResourceExhaustedError("all busy");
  ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"stream", true}}),
              429);
  ExpectAllFinished();
  EXPECT_EQ(server_->tracker().FinishedCount(RequestState::kFailed), 2);
}

TEST_F(RouterHttpTest, StreamFailingMidwayEndsWithAnErrorEvent) {
  FakeScript s;
  s.fail_after_tokens = 2;
  Start(s);
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"stream", true}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const std::vector<std::string> events = SseEvents(res->body);
  ASSERT_EQ(events.size(), 4u) << res->body;  // 2 tokens, error, [DONE]
  EXPECT_EQ(json::parse(events[1])["choices"][0]["text"], ",");
  const json err = json::parse(events[2]);
  EXPECT_EQ(err["error"]["message"], "worker crashed");
  EXPECT_EQ(err["error"]["type"], "server_error");
  EXPECT_EQ(events[3], "[DONE]");
  ExpectAllFinished();
  EXPECT_EQ(server_->tracker().FinishedCount(RequestState::kFailed), 1);
}

TEST_F(RouterHttpTest, SlowBackendTimesOutWith504) {
  FakeScript s;
  s.stall_for = absl::Seconds(2);
  RouterConfig c;
  c.request_timeout_s = 0.3;
  Start(s, c);
  const absl::Time t0 = absl::Now();
  const json e = ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}}), 504);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1.5)) << "the router, not the backend, ends it";
  EXPECT_EQ(e["code"], "timeout");
  EXPECT_NE(e["message"].get<std::string>().find("timed out"), std::string::npos);
  // Streaming: no token before the deadline is also a 504.
  ExpectError(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}, {"stream", true}}),
              504);
  EXPECT_EQ(server_->tracker().FinishedCount(RequestState::kTimedOut), 2);
  EXPECT_EQ(server_->tracker().InFlight(), 0u);
}

// A client that leaves cancels its generation, also when it is not streaming (the router then
// writes nothing to it until the end, so it has to look at the connection).
TEST_F(RouterHttpTest, AClientThatLeavesCancelsItsGeneration) {
  FakeScript s;
  s.pieces = std::vector<std::string>(100, "x");
  s.token_delay = absl::Milliseconds(40);  // 4 s for all of them
  s.context_length = 256;
  RouterConfig c;
  c.max_tokens_limit = 1000;
  Start(s, c);
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    const int cancelled_before = server_->tracker().FinishedCount(RequestState::kCancelled);
    const int cancellations_before = backend_->cancellations();
    const absl::Time t0 = absl::Now();
    const json body = {{"model", "fake-model"}, {"prompt", "x"}, {"max_tokens", 100},
                       {"stream", stream}};
    PostThenHangUp(server_->http_port(), body.dump(), absl::Milliseconds(300));
    while ((server_->tracker().InFlight() > 0 ||
            backend_->cancellations() == cancellations_before) &&
           absl::Now() - t0 < absl::Seconds(3)) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(server_->tracker().InFlight(), 0u) << "the request should have ended";
    EXPECT_EQ(server_->tracker().FinishedCount(RequestState::kCancelled), cancelled_before + 1);
    ASSERT_EQ(backend_->cancellations(), cancellations_before + 1);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(2)) << "not at the end of the generation (4 s)";
    EXPECT_LT(backend_->cancelled_after_tokens(), 50) << "the backend should have stopped early";
  }
}

// A client that leaves while its prompt is still being prefilled (no token yet) stops the
// prefill: the backend sees request.cancelled turn true.
TEST_F(RouterHttpTest, AClientThatLeavesDuringThePrefillStopsIt) {
  FakeScript s;
  s.prefill_for = absl::Seconds(5);
  Start(s);
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    const int before = backend_->prefill_cancellations();
    const absl::Time t0 = absl::Now();
    const json body = {{"model", "fake-model"}, {"prompt", "x"}, {"stream", stream}};
    PostThenHangUp(server_->http_port(), body.dump(), absl::Milliseconds(300));
    while (backend_->prefill_cancellations() == before && absl::Now() - t0 < absl::Seconds(4)) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(backend_->prefill_cancellations(), before + 1);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(2)) << "not at the end of the prefill (5 s)";
  }
  for (int i = 0; i < 100 && server_->tracker().InFlight() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(server_->tracker().InFlight(), 0u);
}

// Connections that hold a thread (streams, or clients stalled mid-request for the 30 s read
// timeout) beyond the old fixed pool of 64 must not delay anyone else.
TEST_F(RouterHttpTest, ManyStalledClientsDoNotDelayHealthChecksOrRequests) {
  Start();
  std::vector<int> stalled;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 100; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string head =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{\"model\":";  // the rest of the body never comes
    ASSERT_EQ(send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
    stalled.push_back(fd);
  }
  // With httplib's listen backlog of 5, every sixth connect here waited for a 1 s SYN retry.
  EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << "100 connects";
  absl::SleepFor(absl::Milliseconds(200));  // every stalled request is being read
  absl::Time t0 = absl::Now();
  auto health = client_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  t0 = absl::Now();
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  for (int fd : stalled) close(fd);
}

// A completion that stops before its first token (the model's first pick is end-of-generation)
// still has a time to first token.
TEST_F(RouterHttpTest, ACompletionThatStopsAtOnceHasATimeToFirstToken) {
  FakeScript script;
  script.pieces = {};
  Start(script);
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "abc"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["finish_reason"], "stop") << res->body;
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("oscarkv_router_time_to_first_token_seconds_count 1"), std::string::npos)
      << m->body;
}

TEST_F(RouterHttpTest, HealthReadinessDrainAndMetrics) {
  Start();
  EXPECT_EQ(client_->Get("/healthz")->status, 200);
  EXPECT_EQ(client_->Get("/readyz")->status, 200);
  ASSERT_EQ(Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "abc"}})->status, 200);
  ExpectError(Post("/v1/completions", {{"model", "nope"}, {"prompt", "x"}}), 404);
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("oscarkv_router_requests_total{endpoint=\"completions\",code=\"200\"} 1"),
            std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("oscarkv_router_requests_total{endpoint=\"completions\",code=\"404\"} 1"),
            std::string::npos);
  EXPECT_NE(m->body.find("oscarkv_router_completion_tokens_total 4"), std::string::npos);
  EXPECT_NE(m->body.find("oscarkv_router_prompt_tokens_total 3"), std::string::npos);
  EXPECT_NE(m->body.find("oscarkv_router_time_to_first_token_seconds_count 1"), std::string::npos);

  std::thread drain([&] { server_->Drain(); });
  drain.join();
  // After drain the listener is gone: connections fail.
  EXPECT_FALSE(client_->Get("/healthz"));
}

TEST_F(RouterHttpTest, NotReadyBackendFailsReadiness) {
  FakeScript s;
  s.ready = false;
  Start(s);
  EXPECT_EQ(client_->Get("/readyz")->status, 503);
  EXPECT_EQ(client_->Get("/healthz")->status, 200);
}

TEST_F(RouterHttpTest, DrainWaitsForInFlightThenRejectsNewRequests) {
  FakeScript s;
  s.token_delay = absl::Milliseconds(100);  // 4 tokens: ~400 ms
  Start(s);
  std::thread slow([&] {
    httplib::Client c2("127.0.0.1", server_->http_port());
    c2.set_read_timeout(10, 0);
    auto res = c2.Post("/v1/completions", R"({"model":"fake-model","prompt":"x"})",
                       "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << "an in-flight request completes during drain";
    EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], "Hello, world!");
  });
  while (server_->tracker().InFlight() == 0) absl::SleepFor(absl::Milliseconds(2));
  std::thread drain([&] { server_->Drain(); });
  absl::SleepFor(absl::Milliseconds(50));
  // Draining: new work is refused while the old one finishes.
  auto res = Post("/v1/completions", {{"model", "fake-model"}, {"prompt", "x"}});
  if (res) {
    EXPECT_EQ(res->status, 503);
    EXPECT_EQ(client_->Get("/readyz")->status, 503);
  }
  slow.join();
  drain.join();
  EXPECT_EQ(server_->tracker().FinishedCount(RequestState::kDone), 1);
}

// What a client got for a completion posted from another thread (status 0: no response).
struct Reply {
  int status = 0;
  std::string body;
};
Reply PostCompletion(int port, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  return r ? Reply{r->status, r->body} : Reply{};
}

// Requests still running at the drain limit end then, each with a reason (503; a stream with
// an error event and [DONE], also one still waiting for its first token), their backend work is
// cancelled, and the drain does not wait for them to finish.
TEST_F(RouterHttpTest, DrainCutsOffRequestsAtItsLimit) {
  FakeScript s;
  s.prefill_for = absl::Seconds(20);
  RouterConfig c;
  c.drain_timeout_s = 0.3;
  Start(s, c);
  std::vector<std::thread> clients;
  std::vector<Reply> results(2);
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      results[i] = PostCompletion(server_->http_port(),
                                  {{"model", "fake-model"}, {"prompt", "x"}, {"stream", i == 1}});
    });
  }
  for (int i = 0; i < 1000 && server_->tracker().InFlight() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(server_->tracker().InFlight(), 2u);
  const absl::Time t0 = absl::Now();
  server_->Drain();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3)) << "not the backend's 20 s";
  for (std::thread& t : clients) t.join();
  for (const Reply& r : results) {
    EXPECT_EQ(r.status, 503) << r.body;  // neither had a token yet
    EXPECT_NE(r.body.find("drain limit"), std::string::npos) << r.body;
  }
  EXPECT_EQ(server_->tracker().InFlight(), 0u);
  for (int i = 0; i < 100 && backend_->prefill_cancellations() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(backend_->prefill_cancellations(), 2) << "the backend work stops too";
}

// A stream already delivering tokens at the drain limit ends with an error event and [DONE].
TEST_F(RouterHttpTest, DrainCutsOffARunningStreamWithAnErrorEvent) {
  FakeScript s;
  s.pieces = std::vector<std::string>(100, "x");
  s.token_delay = absl::Milliseconds(100);  // 10 s in all
  s.context_length = 256;
  RouterConfig c;
  c.drain_timeout_s = 0.5;
  Start(s, c);
  Reply reply;
  std::thread client([&] {
    reply = PostCompletion(server_->http_port(), {{"model", "fake-model"},
                                                  {"prompt", "x"},
                                                  {"max_tokens", 100},
                                                  {"stream", true}});
  });
  for (int i = 0; i < 1000 && server_->tracker().InFlight() < 1; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time t0 = absl::Now();
  server_->Drain();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  client.join();
  EXPECT_EQ(reply.status, 200);
  const std::string& body = reply.body;
  EXPECT_NE(body.find("drain limit"), std::string::npos) << body;
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
  EXPECT_LT(std::count(body.begin(), body.end(), 'x'), 60) << "cut off, not finished";
}

}  // namespace
}  // namespace oscarkv::router
