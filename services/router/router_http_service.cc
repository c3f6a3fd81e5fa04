#include "services/router/router_http_service.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/log.h"
#include "lib/base/splitmix64.h"
#include "lib/metrics/metrics.h"
#include "services/router/client_connection.h"
#include "services/router/request_tracker.h"
#include "services/router/router_metrics.h"

namespace oscarkv::router {
namespace {

constexpr char kJson[] = "application/json";
// How often a request that writes nothing yet looks whether its client is still connected.
constexpr absl::Duration kPeerCheckInterval = absl::Milliseconds(200);

void SendError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  res.set_content(ApiErrorBody(error), kJson);
}

std::string EndpointLabel(Endpoint e) {
  return e == Endpoint::kCompletions ? "completions" : "chat_completions";
}

// Shared between the handler (consumer) and the threads running the backend (producers), one
// per choice (`n`). The producers only append; the consumer decides the request's fate.
struct RunState {
  absl::Mutex mu;
  std::deque<std::pair<int, TokenEvent>> tokens ABSL_GUARDED_BY(mu);  // (choice, token)
  // Choices whose backend call returned, with its outcome, in the order they returned.
  std::deque<std::pair<int, absl::StatusOr<CompletionOutcome>>> ended ABSL_GUARDED_BY(mu);
  std::atomic<bool> cancelled{false};

  bool HasNews() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return !tokens.empty() || !ended.empty(); }
};

// Runs choice `choice` of a request on its own thread, which owns references to everything it
// touches.
void StartChoice(std::shared_ptr<CompletionBackend> backend, CompletionRequest request,
                 int choice, std::shared_ptr<RunState> state) {
  request.cancelled = [state] { return state->cancelled.load(); };
  std::thread([state = std::move(state), backend = std::move(backend),
               request = std::move(request), choice] {
    absl::StatusOr<CompletionOutcome> outcome =
        backend->Complete(request, [&state, choice](const TokenEvent& t) {
          if (state->cancelled.load()) return false;
          absl::MutexLock lock(&state->mu);
          state->tokens.emplace_back(choice, t);
          return true;
        });
    absl::MutexLock lock(&state->mu);
    state->ended.emplace_back(choice, std::move(outcome));
  }).detach();
}

struct News {
  std::vector<std::pair<int, TokenEvent>> tokens;
  std::vector<std::pair<int, absl::StatusOr<CompletionOutcome>>> ended;
};

// Waits until a choice has tokens or has ended, or `deadline` passes; moves out what is new.
// Returns false on timeout with nothing new.
bool WaitForNews(RunState& state, absl::Time deadline, News* news) {
  absl::MutexLock lock(&state.mu);
  state.mu.AwaitWithDeadline(absl::Condition(&state, &RunState::HasNews), deadline);
  if (!state.HasNews()) return false;
  for (auto& t : state.tokens) news->tokens.push_back(std::move(t));
  state.tokens.clear();
  for (auto& e : state.ended) news->ended.push_back(std::move(e));
  state.ended.clear();
  return true;
}

// Choice j > 0 of a seeded request gets its own seed (SplitMix64 of seed + j), so that the n
// completions differ and the whole set still reproduces.
uint64_t ChoiceSeed(uint64_t seed, int choice) {
  return SplitMix64Mix(seed + static_cast<uint64_t>(choice) * kSplitMix64Increment);
}

absl::Status CutOffStatus() {
  return absl::UnavailableError(
      "the router is shutting down and this request ran past its drain limit");
}

absl::Status TimeoutStatus(absl::Duration timeout) {
  return absl::DeadlineExceededError(
      absl::StrCat("request timed out after ", absl::FormatDuration(timeout),
                   " (router --request_timeout_s); generation was cancelled"));
}

// Per-request bookkeeping the handler carries into the stream.
struct Exchange {
  Endpoint endpoint;
  ResponseMeta meta;
  std::string id;  // tracker id
  int prompt_tokens = 0;
  bool include_usage = false;
  absl::Time received;
  absl::Time deadline;
  std::shared_ptr<RunState> run;
  struct Choice {
    std::string text;           // non-streaming: the whole output
    ResponseLogprobs logprobs;  // non-streaming, when asked for: every token's
    std::vector<TokenLogprob> prompt_logprobs;  // vLLM's prompt_logprobs, when asked for
    int text_chars = 0;  // characters of text delivered so far (the next token's text_offset)
    std::optional<FinishReason> finish;  // set when it ended well
  };
  std::vector<Choice> choices;
  // Per prompt, its choices after the first (index, request): they start once the first has a
  // token, so that their prefills find the prompt's blocks in the kvstore instead of all
  // computing them at once.
  std::vector<std::vector<std::pair<int, CompletionRequest>>> later;
  // Per prompt with later choices, the prompt tokens its first choice delivered, for them.
  std::vector<std::vector<TokenEvent>> prompt_events;
  int waiting = 0;                // choices in `later`
  int running = 0;                // choices started and not yet ended
  std::optional<absl::Status> failed;  // the first choice that failed
  // Streaming: what is not yet sent, in order: tokens (one event each) and choice ends.
  struct Piece {
    int choice = 0;
    std::string text;
    std::optional<TokenLogprob> logprob;
    int text_offset = 0;
    std::optional<FinishReason> finish;  // set: the choice's finish event, no token
  };
  std::vector<Piece> pending;
  bool stream = false;
  int logprobs = -1;         // alternatives per token (the request's logprobs); -1 = off
  bool echo = false;
  int prompt_logprobs = -1;  // vLLM's: alternatives per prompt token; -1 = off
  bool tokens_as_ids = false;
  int completion_tokens = 0;  // all choices, generated tokens only
  int delivered = 0;          // all choices, echoed prompt tokens included
  std::optional<absl::Time> first_token_at;
  absl::Time last_token_at;
  bool finished = false;  // tracker and metrics have seen the end

  bool done() const { return failed.has_value() || (waiting == 0 && running == 0); }
};

// Code points in `s` (UTF-8; a stray continuation byte does not count).
int Utf8Chars(std::string_view s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// One stream event for a token: its text and, when asked for, its logprobs. Empty when there
// is nothing to say (no text, no logprobs).
std::string TokenStreamEvent(const ResponseMeta& meta, const Exchange::Piece& piece,
                             bool tokens_as_ids) {
  if (piece.finish) return StreamFinishEvent(meta, *piece.finish, piece.choice);
  if (!piece.logprob) {
    return piece.text.empty() ? std::string()
                              : StreamTextEvent(meta, piece.text, nullptr, piece.choice);
  }
  const ResponseLogprobs one{{*piece.logprob}, {piece.text_offset}, tokens_as_ids};
  return StreamTextEvent(meta, piece.text, &one, piece.choice);
}

}  // namespace

RouterHttpService::RouterHttpService(HttpServiceOptions options,
                                     std::shared_ptr<CompletionBackend> backend,
                                     RequestTracker* tracker, RouterMetrics* metrics,
                                     metrics::Registry* metrics_registry)
    : options_(std::move(options)),
      backend_(std::move(backend)),
      tracker_(tracker),
      metrics_(metrics),
      metrics_registry_(metrics_registry) {
  CHECK(backend_ != nullptr);
  CHECK(tracker_ != nullptr);
  CHECK(metrics_ != nullptr);
  CHECK(metrics_registry_ != nullptr);
}

std::vector<ModelInfo> RouterHttpService::Models() const {
  std::vector<ModelInfo> models = backend_->Models();
  if (!options_.served_model_name.empty() && !models.empty()) {
    models.resize(1);
    models[0].id = options_.served_model_name;
  }
  return models;
}

void RouterHttpService::Register(httplib::Server& server) {
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(Endpoint::kCompletions, req, res);
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(Endpoint::kChatCompletions, req, res);
  });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const absl::Time start = absl::Now();
    res.set_content(ModelsBody(Models()), kJson);
    metrics_->OnRequest("models", 200, absl::ToDoubleSeconds(absl::Now() - start));
  });
  // One model (the OpenAI clients' models.retrieve); ids may contain '/'.
  server.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const absl::Time start = absl::Now();
    const std::string id = req.matches[1];
    std::vector<std::string> ids;
    for (const ModelInfo& m : Models()) {
      if (m.id == id) {
        res.set_content(ModelBody(m), kJson);
        metrics_->OnRequest("models", 200, absl::ToDoubleSeconds(absl::Now() - start));
        return;
      }
      ids.push_back(m.id);
    }
    ApiError e;
    e.http_status = 404;
    e.message = absl::StrCat("The model '", id, "' does not exist; this server serves: ",
                             absl::StrJoin(ids, ", "));
    e.code = "model_not_found";
    SendError(res, e);
    metrics_->OnRequest("models", 404, absl::ToDoubleSeconds(absl::Now() - start));
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    if (draining()) {
      res.status = 503;
      res.set_content("draining\n", "text/plain");
    } else if (!backend_->Ready()) {
      res.status = 503;
      res.set_content("backend not ready (no healthy workers or model not loaded)\n", "text/plain");
    } else {
      res.set_content("ready\n", "text/plain");
    }
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_registry_->Expose(), metrics::kExpositionContentType);
  });
  // Errors httplib produces itself (unknown route 404, wrong method 405, body too large 413)
  // get a body in OpenAI's shape too.
  server.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.http_status = res.status;
    // httplib routes by method and path, so a known path asked with another method comes here
    // as a 404; it is a 405 with the method that path takes.
    static const std::map<std::string, std::string> kMethodOfPath = {
        {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"},
        {"/healthz", "GET"},         {"/readyz", "GET"},               {"/metrics", "GET"}};
    const auto known = kMethodOfPath.find(req.path);
    const bool other_method = known != kMethodOfPath.end() ||
                              absl::StartsWith(req.path, "/v1/models/");
    if (res.status == 404 && other_method) {
      res.status = 405;
      e.http_status = 405;
      const std::string allow = known != kMethodOfPath.end() ? known->second : "GET";
      res.set_header("Allow", allow);
      e.message = absl::StrCat("Method ", req.method, " is not allowed on ", req.path, "; use ",
                               allow);
      e.code = "method_not_allowed";
    } else if (res.status == 404) {
      e.message = absl::StrCat("Unknown path ", req.method, " ", req.path);
      e.code = "unknown_url";
    } else if (res.status == 413) {
      e.message = absl::StrCat("Request body too large: this server takes at most ",
                               options_.max_body_bytes, " bytes");
    } else {
      e.message = absl::StrCat("HTTP ", res.status, " for ", req.method, " ", req.path);
    }
    res.set_content(ApiErrorBody(e), kJson);
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LOG(ERROR) << "HTTP handler threw: " << what;
        ApiError e = ApiErrorFromStatus(absl::InternalError(absl::StrCat("internal error: ", what)));
        SendError(res, e);
      });
}

void RouterHttpService::HandleCompletion(Endpoint endpoint, const httplib::Request& req,
                                         httplib::Response& res) {
  const absl::Time received = absl::Now();
  const std::string label = EndpointLabel(endpoint);
  auto reject = [&](const ApiError& e) {
    SendError(res, e);
    metrics_->OnRequest(label, e.http_status, absl::ToDoubleSeconds(absl::Now() - received));
    VLOG(1) << label << " rejected " << e.http_status << ": " << e.message;
  };

  if (draining()) {
    reject(ApiErrorFromStatus(absl::UnavailableError("server is shutting down (draining)")));
    return;
  }
  ParseResult parsed = ParseApiRequest(endpoint, req.get_header_value("Content-Type"), req.body,
                                       req.get_header_value("X-Session-Id"), options_.limits);
  if (parsed.error) return reject(*parsed.error);
  ApiRequest& api = parsed.request;

  // Model: by the id clients see; map to the backend's id.
  const std::vector<ModelInfo> served = Models();
  const std::vector<ModelInfo> backend_models = backend_->Models();
  std::optional<ModelInfo> model;
  for (size_t i = 0; i < served.size(); ++i) {
    if (served[i].id == api.model) {
      model = backend_models[i];
      model->id = backend_models[i].id;
    }
  }
  if (!model) {
    std::vector<std::string> ids;
    for (const ModelInfo& m : served) ids.push_back(m.id);
    ApiError e;
    e.http_status = 404;
    e.message = absl::StrCat("The model '", api.model, "' does not exist; this server serves: ",
                             absl::StrJoin(ids, ", "));
    e.param = "model";
    e.code = "model_not_found";
    return reject(e);
  }

  // Token ids the request names (not the prompt's: Tokenize checks those) exist, checked here
  // rather than by a worker after placement.
  if (model->vocab_size > 0) {
    auto outside = [&](const char* field, int32_t token) {
      return ApiError{400,
                      absl::StrCat("'", field, "' token id ", token,
                                   " is outside the vocabulary [0, ", model->vocab_size, ")"),
                      "invalid_request_error", field, ""};
    };
    for (const auto& [token, bias] : api.logit_bias) {
      if (token >= model->vocab_size) return reject(outside("logit_bias", token));
    }
    for (const int32_t token : api.stop_token_ids) {
      if (token >= model->vocab_size) return reject(outside("stop_token_ids", token));
    }
  }

  // Each prompt: tokenized, within the context, with its max_tokens (when not given: the
  // default clipped to the context it leaves).
  const std::string prompt_param = endpoint == Endpoint::kCompletions ? "prompt" : "messages";
  const int context = model->context_length;
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<int> max_tokens;
  int prompt_tokens = 0;
  for (size_t i = 0; i < api.prompts.size(); ++i) {
    const std::string which =
        api.prompts.size() > 1 ? absl::StrCat(" (prompt ", i, ")") : std::string();
    absl::StatusOr<std::vector<int32_t>> tokens = backend_->Tokenize(model->id, api.prompts[i]);
    if (!tokens.ok()) {
      ApiError e = ApiErrorFromStatus(tokens.status());
      if (e.http_status == 400) e.param = prompt_param;
      e.message += which;
      return reject(e);
    }
    const int n_tokens = static_cast<int>(tokens->size());
    if (n_tokens == 0) {
      return reject(ApiError{400, absl::StrCat("the prompt is empty after tokenization", which),
                             "invalid_request_error", prompt_param, ""});
    }
    if (n_tokens >= context) {
      // Even with max_tokens 0 (echo) the workers need room for the token after the prompt.
      return reject(ApiError{400,
                             absl::StrCat("This model's maximum context length is ", context,
                                          " tokens, and a prompt must be shorter; this one has ",
                                          n_tokens, " tokens", which,
                                          ". Please reduce the prompt."),
                             "invalid_request_error", prompt_param, "context_length_exceeded"});
    }
    if (api.max_tokens && n_tokens + *api.max_tokens > context) {
      ApiError e;
      e.message = absl::StrCat("This model's maximum context length is ", context,
                               " tokens. However, you requested ",
                               n_tokens + api.max_tokens.value_or(1), " tokens (", n_tokens,
                               " in the prompt, ", api.max_tokens.value_or(1),
                               " for the completion)", which,
                               ". Please reduce the prompt or max_tokens.");
      e.param = "max_tokens";
      e.code = "context_length_exceeded";
      return reject(e);
    }
    max_tokens.push_back(
        api.max_tokens.value_or(std::min(options_.default_max_tokens, context - n_tokens)));
    if (api.min_tokens > max_tokens.back()) {
      return reject(ApiError{400,
                             absl::StrCat("'min_tokens' (", api.min_tokens,
                                          ") must be at most max_tokens (", max_tokens.back(),
                                          ")", which),
                             "invalid_request_error", "min_tokens", ""});
    }
    prompt_tokens += n_tokens;
    prompt_ids.push_back(*std::move(tokens));
  }

  // Admitted: from here on the tracker must see Finish exactly once.
  Exchange x;
  x.endpoint = endpoint;
  x.received = received;
  x.prompt_tokens = prompt_tokens;
  x.include_usage = api.include_usage;
  x.stream = api.stream;
  x.logprobs = api.logprobs;
  x.echo = api.echo;
  x.prompt_logprobs = api.prompt_logprobs;
  x.tokens_as_ids = api.return_tokens_as_token_ids;
  x.id = tracker_->Admit(options_.request_timeout, api.session_id);
  x.deadline = tracker_->Deadline(x.id);
  x.meta.endpoint = endpoint;
  x.meta.id = absl::StrCat(endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-", x.id);
  x.meta.created = absl::ToUnixSeconds(received);
  x.meta.model = api.model;
  x.meta.session_id = api.session_id;
  x.meta.stream_usage = api.stream && api.include_usage;
  metrics_->in_flight().Add(1);

  CompletionRequest base;
  base.model = model->id;
  base.temperature = api.temperature;
  base.top_p = api.top_p;
  base.top_k = api.top_k;
  base.presence_penalty = api.presence_penalty;
  base.frequency_penalty = api.frequency_penalty;
  base.logit_bias = api.logit_bias;
  base.ignore_eos = api.ignore_eos;
  base.min_tokens = api.min_tokens;
  base.stop_token_ids = api.stop_token_ids;
  base.stop = api.stop;
  base.logprobs = api.logprobs;
  base.echo = api.echo;
  base.prompt_logprobs = api.prompt_logprobs;
  base.session_id = api.session_id;
  base.codec = api.codec.empty() ? options_.default_codec : api.codec;
  base.deadline = x.deadline;
  tracker_->MarkRunning(x.id, prompt_tokens);
  VLOG(1) << x.meta.id << " admitted: " << prompt_tokens << " prompt tokens in "
          << api.prompts.size() << " prompt(s), n " << api.n << ", codec " << base.codec
          << ", session '" << base.session_id << "'" << (api.stream ? ", streaming" : "");
  // Choice i * n + j is prompt i's j-th: its own request id and seed (choice 0 the client's;
  // the others derived from it, or random per choice when unseeded). Each prompt's first
  // choice starts now; its others once it has a token (Exchange::later).
  const int n = api.n;
  x.choices.resize(api.prompts.size() * n);
  x.later.resize(api.prompts.size());
  x.prompt_events.resize(api.prompts.size());
  x.run = std::make_shared<RunState>();
  for (size_t i = 0; i < api.prompts.size(); ++i) {
    for (int j = 0; j < n; ++j) {
      const int index = static_cast<int>(i) * n + j;
      CompletionRequest r = base;
      r.request_id = index == 0 ? x.meta.id : absl::StrCat(x.meta.id, "-", index);
      r.prompt_token_ids = prompt_ids[i];
      r.max_tokens = max_tokens[i];
      if (api.seed) r.seed = index == 0 ? *api.seed : ChoiceSeed(*api.seed, index);
      if (j == 0) {
        ++x.running;
        StartChoice(backend_, std::move(r), index, x.run);
      } else {
        x.later[i].emplace_back(index, std::move(r));
        ++x.waiting;
      }
    }
  }
  // Takes one token of a choice in: into the choice (or, streaming, into pending).
  auto take = [this](Exchange& x, int choice, TokenEvent t) {
    Exchange::Choice& c = x.choices[choice];
    if (t.prompt) {
      // The backend scored it with the larger of the two alternative counts; each use keeps
      // its own.
      auto cut = [&t](int n) {
        TokenLogprob lp = *t.logprob;
        lp.top.resize(std::min(lp.top.size(), static_cast<size_t>(std::max(0, n))));
        return lp;
      };
      if (x.prompt_logprobs >= 0 && t.logprob) {
        c.prompt_logprobs.push_back(cut(x.prompt_logprobs));
      }
      if (!x.echo) return;
      if (t.logprob) t.logprob = cut(x.logprobs);
    }
    ++x.delivered;
    if (!t.prompt) {
      const absl::Time now = absl::Now();
      if (auto ttft = tracker_->OnToken(x.id)) {
        metrics_->ObserveTimeToFirstToken(absl::ToDoubleSeconds(*ttft));
        x.first_token_at = now;
      }
      x.last_token_at = now;
      ++x.completion_tokens;
    }
    const int offset = c.text_chars;
    c.text_chars += Utf8Chars(t.text);
    if (x.logprobs < 0) t.logprob.reset();
    if (x.stream) {
      x.pending.push_back({choice, std::move(t.text), std::move(t.logprob), offset, {}});
    } else {
      c.text += t.text;
      if (t.logprob) {
        c.logprobs.tokens.push_back(std::move(*t.logprob));
        c.logprobs.text_offsets.push_back(offset);
      }
    }
  };
  // A prompt's later choices deliver the same prompt tokens (echo, prompt_logprobs) as its
  // first: they get the first's copies, and their own prefills neither score nor send the prompt
  // (so they may reuse its stored blocks). With max_tokens 0 (the prompt alone) a later choice
  // would produce exactly what the first did, seed or not: it never runs, and takes the first's
  // prompt tokens and finish reason when the first ends.
  auto start_later = [this, n, take](Exchange& x, int choice) {
    if (choice % n != 0 || x.failed) return;
    const int prompt = choice / n;
    if (x.later[prompt].empty()) return;
    const std::optional<FinishReason>& first_finish = x.choices[choice].finish;
    const bool prompt_only = x.later[prompt].front().second.max_tokens == 0;
    if (prompt_only && !first_finish) return;  // filled once the first ends
    for (auto& [index, r] : x.later[prompt]) {
      --x.waiting;
      if (prompt_only) {
        for (const TokenEvent& t : x.prompt_events[prompt]) take(x, index, t);
        x.choices[index].finish = first_finish;
        if (x.stream) x.pending.push_back({index, "", std::nullopt, 0, first_finish});
        continue;
      }
      if (DeliversPrompt(r)) {
        for (const TokenEvent& t : x.prompt_events[prompt]) take(x, index, t);
        r.echo = false;
        r.prompt_logprobs = -1;
      }
      ++x.running;
      StartChoice(backend_, std::move(r), index, x.run);
    }
    x.later[prompt].clear();
    x.prompt_events[prompt].clear();
  };
  // Takes in what the choices produced: tokens into each choice (or, streaming, into pending),
  // ends into finish reasons or the request's failure.
  // (By value: the streaming provider runs it after this handler has returned.)
  auto absorb = [n, take, start_later](Exchange& x, News& news) {
    for (auto& [choice, t] : news.tokens) {
      const bool generated = !t.prompt;
      if (t.prompt && n > 1 && choice % n == 0) x.prompt_events[choice / n].push_back(t);
      take(x, choice, std::move(t));
      if (generated) start_later(x, choice);
    }
    for (auto& [choice, outcome] : news.ended) {
      --x.running;
      if (!outcome.ok()) {
        if (!x.failed) x.failed = outcome.status();
        x.run->cancelled.store(true);  // the other choices stop too
        continue;
      }
      x.choices[choice].finish = outcome->finish_reason;
      if (x.stream) x.pending.push_back({choice, "", std::nullopt, 0, outcome->finish_reason});
      start_later(x, choice);
    }
  };
  // Records the end of the request in tracker and metrics.
  auto finish = [this, label](Exchange& x, const absl::Status& status, int http_status) {
    if (x.finished) return;
    x.finished = true;
    x.run->cancelled.store(true);
    // A completion whose first token was a stop token delivers none, but its first token came
    // then: counted, or the fastest answers would be missing from the histogram.
    if (status.ok() && !x.first_token_at &&
        std::any_of(x.choices.begin(), x.choices.end(),
                    [](const Exchange::Choice& c) { return c.finish == FinishReason::kStop; })) {
      metrics_->ObserveTimeToFirstToken(absl::ToDoubleSeconds(absl::Now() - x.received));
    }
    if (x.completion_tokens > 1 && x.first_token_at) {
      metrics_->ObserveTimePerOutputToken(
          absl::ToDoubleSeconds(x.last_token_at - *x.first_token_at) / (x.completion_tokens - 1));
    }
    metrics_->AddTokens(x.prompt_tokens, x.completion_tokens);
    metrics_->in_flight().Sub(1);
    metrics_->OnRequest(label, http_status, absl::ToDoubleSeconds(absl::Now() - x.received));
    tracker_->Finish(x.id, status);
    if (!status.ok() && !absl::IsCancelled(status)) {
      LOG(WARNING) << x.meta.id << " failed after " << x.completion_tokens
                   << " tokens: " << status;
    }
  };

  // Wait for the first token (streaming) or the end (non-streaming); errors before any token
  // get a proper HTTP status. Nothing is written meanwhile, so the client's connection is
  // looked at every kPeerCheckInterval: a client that left cancels the generation. Its socket
  // is found at the first look, so requests that end sooner never search for it.
  std::optional<ClientConnection> client;
  bool client_searched = false;
  absl::Time next_peer_check = absl::Now() + kPeerCheckInterval;
  while (!x.done() && (!api.stream || x.delivered == 0)) {
    News news;
    const bool news_came = WaitForNews(*x.run, std::min(x.deadline, next_peer_check), &news);
    if (cut_off_.load()) {
      SendError(res, ApiErrorFromStatus(CutOffStatus()));
      finish(x, CutOffStatus(), 503);
      return;
    }
    if (absl::Now() >= next_peer_check) {
      if (!client_searched) {
        client = ClientConnection::Find(
            {req.local_addr, req.local_port, req.remote_addr, req.remote_port});
        client_searched = true;
      }
      if (client && client->Closed()) {
        finish(x, absl::CancelledError("client disconnected"), 499);
        return;
      }
      next_peer_check = absl::Now() + kPeerCheckInterval;
    }
    if (!news_came) {
      if (absl::Now() < x.deadline) continue;  // woke only to look at the client
      const absl::Status s = TimeoutStatus(options_.request_timeout);
      SendError(res, ApiErrorFromStatus(s));
      finish(x, s, 504);
      return;
    }
    absorb(x, news);
  }
  if (x.failed && (x.delivered == 0 || !api.stream)) {
    const ApiError e = ApiErrorFromStatus(*x.failed);
    SendError(res, e);
    finish(x, *x.failed, e.http_status);
    return;
  }
  if (!api.stream) {
    std::vector<ChoiceBody> bodies;
    for (Exchange::Choice& c : x.choices) {
      c.logprobs.tokens_as_ids = x.tokens_as_ids;
      bodies.push_back({c.text, c.finish.value_or(FinishReason::kLength),
                        x.logprobs >= 0 ? &c.logprobs : nullptr,
                        x.prompt_logprobs >= 0 ? &c.prompt_logprobs : nullptr});
    }
    res.set_content(CompletionBody(x.meta, bodies, Usage{x.prompt_tokens, x.completion_tokens}),
                    kJson);
    finish(x, absl::OkStatus(), 200);
    return;
  }

  // Streaming: the first token(s) are in x.pending; the rest arrive in the provider.
  res.set_header("Cache-Control", "no-cache");
  auto shared = std::make_shared<Exchange>(std::move(x));
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, shared, absorb, finish](size_t, httplib::DataSink& sink) mutable {
        Exchange& x = *shared;
        auto write = [&sink](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto client_gone = [&] {
          finish(x, absl::CancelledError("client disconnected"), 499);
          return false;
        };
        auto flush = [&] {
          for (const Exchange::Piece& piece : x.pending) {
            const std::string event = TokenStreamEvent(x.meta, piece, x.tokens_as_ids);
            if (!event.empty() && !write(event)) return false;
          }
          x.pending.clear();
          return true;
        };
        if (x.endpoint == Endpoint::kChatCompletions) {
          for (int j = 0; j < static_cast<int>(x.choices.size()); ++j) {
            if (!write(StreamRoleEvent(x.meta, j))) return client_gone();
          }
        }
        if (!flush()) return client_gone();
        while (!x.done()) {
          News news;
          const bool news_came =
              WaitForNews(*x.run, std::min(x.deadline, absl::Now() + kPeerCheckInterval), &news);
          if (cut_off_.load()) {
            write(StreamErrorEvent(ApiErrorFromStatus(CutOffStatus())));
            write(std::string(kStreamDoneEvent));
            sink.done();
            finish(x, CutOffStatus(), 503);
            return true;
          }
          if (!news_came) {
            if (absl::Now() < x.deadline) continue;  // woke only to look at the cut-off
            const absl::Status s = TimeoutStatus(options_.request_timeout);
            write(StreamErrorEvent(ApiErrorFromStatus(s)));
            write(std::string(kStreamDoneEvent));
            sink.done();
            finish(x, s, 504);
            return true;
          }
          absorb(x, news);
          if (!flush()) return client_gone();
        }
        if (x.failed) {
          write(StreamErrorEvent(ApiErrorFromStatus(*x.failed)));
          write(std::string(kStreamDoneEvent));
          sink.done();
          finish(x, *x.failed, ApiErrorFromStatus(*x.failed).http_status);
          return true;
        }
        bool ok = true;
        if (x.include_usage) {
          ok = write(StreamUsageEvent(x.meta, Usage{x.prompt_tokens, x.completion_tokens}));
        }
        if (ok) ok = write(std::string(kStreamDoneEvent));
        if (!ok) return client_gone();
        sink.done();
        finish(x, absl::OkStatus(), 200);
        return true;
      },
      // Runs when httplib is done with the response; covers a client that left before the
      // provider ran, so the request still ends (cancelled) in the tracker.
      [shared, finish](bool) mutable {
        if (!shared->finished) {
          finish(*shared, absl::CancelledError("client disconnected before streaming began"), 499);
        }
      });
}

}  // namespace oscarkv::router
