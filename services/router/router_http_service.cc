#include "services/router/router_http_service.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/log.h"
#include "lib/metrics/metrics.h"
#include "services/router/request_tracker.h"
#include "services/router/router_metrics.h"

namespace oscarkv::router {
namespace {

constexpr char kJson[] = "application/json";

void SendError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  res.set_content(ApiErrorBody(error), kJson);
}

std::string EndpointLabel(Endpoint e) {
  return e == Endpoint::kCompletions ? "completions" : "chat_completions";
}

// Shared between the handler (consumer) and the thread running the backend (producer). The
// producer only appends; the consumer decides the request's fate.
struct RunState {
  absl::Mutex mu;
  std::deque<TokenEvent> tokens ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<CompletionOutcome> outcome ABSL_GUARDED_BY(mu) = absl::UnknownError("running");
  std::atomic<bool> cancelled{false};

  bool HasNews() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return done || !tokens.empty(); }
};

// Starts the backend on its own thread. The thread owns references to everything it touches.
std::shared_ptr<RunState> StartRun(std::shared_ptr<CompletionBackend> backend,
                                   CompletionRequest request) {
  auto state = std::make_shared<RunState>();
  std::thread([state, backend = std::move(backend), request = std::move(request)] {
    absl::StatusOr<CompletionOutcome> outcome =
        backend->Complete(request, [&state](const TokenEvent& t) {
          if (state->cancelled.load()) return false;
          absl::MutexLock lock(&state->mu);
          state->tokens.push_back(t);
          return true;
        });
    absl::MutexLock lock(&state->mu);
    state->outcome = std::move(outcome);
    state->done = true;
  }).detach();
  return state;
}

// Waits until the run has tokens or is done, or `deadline` passes; moves out pending tokens.
// Returns false on timeout with nothing new.
bool WaitForNews(RunState& state, absl::Time deadline, std::vector<TokenEvent>* tokens,
                 bool* done, absl::StatusOr<CompletionOutcome>* outcome) {
  absl::MutexLock lock(&state.mu);
  state.mu.AwaitWithDeadline(absl::Condition(&state, &RunState::HasNews), deadline);
  if (!state.HasNews()) return false;
  while (!state.tokens.empty()) {
    tokens->push_back(std::move(state.tokens.front()));
    state.tokens.pop_front();
  }
  if (state.done) {
    *done = true;
    *outcome = state.outcome;
  }
  return true;
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
  std::string text;                  // non-streaming: the whole output
  ResponseLogprobs logprobs;         // non-streaming, when asked for: every token's
  // Streaming: tokens not yet sent, one event each.
  struct Piece {
    std::string text;
    std::optional<TokenLogprob> logprob;
    int text_offset = 0;
  };
  std::vector<Piece> pending;
  bool stream = false;
  bool want_logprobs = false;
  int text_chars = 0;  // characters of text delivered so far (the next token's text_offset)
  int completion_tokens = 0;
  std::optional<absl::Time> first_token_at;
  absl::Time last_token_at;
  bool finished = false;  // tracker and metrics have seen the end
};

// Code points in `s` (UTF-8; a stray continuation byte does not count).
int Utf8Chars(std::string_view s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// One stream event for a token: its text and, when asked for, its logprobs. Empty when there
// is nothing to say (no text, no logprobs).
std::string TokenStreamEvent(const ResponseMeta& meta, const std::string& text,
                             const std::optional<TokenLogprob>& logprob, int text_offset,
                             bool tokens_as_ids) {
  if (!logprob) return text.empty() ? std::string() : StreamTextEvent(meta, text);
  const ResponseLogprobs one{{*logprob}, {text_offset}, tokens_as_ids};
  return StreamTextEvent(meta, text, &one);
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
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 404) {
      e.message = absl::StrCat("Unknown path ", req.method, " ", req.path);
      e.code = "unknown_url";
    } else if (res.status == 413) {
      e.message = "Request body too large (router --max_body_bytes)";
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

  absl::StatusOr<std::vector<int32_t>> tokens = backend_->Tokenize(model->id, api.prompt);
  if (!tokens.ok()) {
    ApiError e = ApiErrorFromStatus(tokens.status());
    if (e.http_status == 400) e.param = endpoint == Endpoint::kCompletions ? "prompt" : "messages";
    return reject(e);
  }
  const int prompt_tokens = static_cast<int>(tokens->size());
  if (prompt_tokens == 0) {
    return reject(ApiError{400, "the prompt is empty after tokenization", "invalid_request_error",
                           endpoint == Endpoint::kCompletions ? "prompt" : "messages", ""});
  }
  const int context = model->context_length;
  if (prompt_tokens >= context ||
      (api.max_tokens && prompt_tokens + *api.max_tokens > context)) {
    ApiError e;
    e.message = absl::StrCat("This model's maximum context length is ", context,
                             " tokens. However, you requested ",
                             prompt_tokens + api.max_tokens.value_or(1), " tokens (", prompt_tokens,
                             " in the prompt, ", api.max_tokens.value_or(1),
                             " for the completion). Please reduce the prompt or max_tokens.");
    e.param = api.max_tokens && prompt_tokens < context
                  ? "max_tokens"
                  : (endpoint == Endpoint::kCompletions ? "prompt" : "messages");
    e.code = "context_length_exceeded";
    return reject(e);
  }
  const int max_tokens =
      api.max_tokens.value_or(std::min(options_.default_max_tokens, context - prompt_tokens));
  if (api.min_tokens > max_tokens) {
    return reject(ApiError{400,
                           absl::StrCat("'min_tokens' (", api.min_tokens,
                                        ") must be at most max_tokens (", max_tokens, ")"),
                           "invalid_request_error", "min_tokens", ""});
  }

  // Admitted: from here on the tracker must see Finish exactly once.
  Exchange x;
  x.endpoint = endpoint;
  x.received = received;
  x.prompt_tokens = prompt_tokens;
  x.include_usage = api.include_usage;
  x.stream = api.stream;
  x.want_logprobs = api.logprobs >= 0;
  x.logprobs.tokens_as_ids = api.return_tokens_as_token_ids;
  x.id = tracker_->Admit(options_.request_timeout, api.session_id);
  x.deadline = tracker_->Deadline(x.id);
  x.meta.endpoint = endpoint;
  x.meta.id = absl::StrCat(endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-", x.id);
  x.meta.created = absl::ToUnixSeconds(received);
  x.meta.model = api.model;
  x.meta.session_id = api.session_id;
  metrics_->in_flight().Add(1);

  CompletionRequest request;
  request.request_id = x.meta.id;
  request.model = model->id;
  request.prompt_token_ids = *std::move(tokens);
  request.max_tokens = max_tokens;
  request.temperature = api.temperature;
  request.top_p = api.top_p;
  request.top_k = api.top_k;
  request.presence_penalty = api.presence_penalty;
  request.frequency_penalty = api.frequency_penalty;
  request.logit_bias = api.logit_bias;
  request.ignore_eos = api.ignore_eos;
  request.min_tokens = api.min_tokens;
  request.seed = api.seed;
  request.stop = api.stop;
  request.logprobs = api.logprobs;
  request.session_id = api.session_id;
  request.codec = api.codec.empty() ? options_.default_codec : api.codec;
  request.deadline = x.deadline;
  tracker_->MarkRunning(x.id, prompt_tokens);
  VLOG(1) << x.meta.id << " admitted: " << prompt_tokens << " prompt tokens, max_tokens "
          << request.max_tokens << ", codec " << request.codec << ", session '"
          << request.session_id << "'" << (api.stream ? ", streaming" : "");
  x.run = StartRun(backend_, std::move(request));

  auto on_tokens = [this, &x](std::vector<TokenEvent>& tokens) {
    for (TokenEvent& t : tokens) {
      const absl::Time now = absl::Now();
      if (auto ttft = tracker_->OnToken(x.id)) {
        metrics_->ObserveTimeToFirstToken(absl::ToDoubleSeconds(*ttft));
        x.first_token_at = now;
      }
      x.last_token_at = now;
      ++x.completion_tokens;
      const int offset = x.text_chars;
      x.text_chars += Utf8Chars(t.text);
      if (x.stream) {
        if (!x.want_logprobs) t.logprob.reset();
        x.pending.push_back({std::move(t.text), std::move(t.logprob), offset});
        continue;
      }
      x.text += t.text;
      if (x.want_logprobs && t.logprob) {
        x.logprobs.tokens.push_back(std::move(*t.logprob));
        x.logprobs.text_offsets.push_back(offset);
      }
    }
  };
  // Records the end of the request in tracker and metrics.
  auto finish = [this, label](Exchange& x, const absl::Status& status, int http_status) {
    if (x.finished) return;
    x.finished = true;
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
  // get a proper HTTP status.
  bool done = false;
  absl::StatusOr<CompletionOutcome> outcome = absl::UnknownError("running");
  while (!done && (!api.stream || x.completion_tokens == 0)) {
    std::vector<TokenEvent> news;
    if (!WaitForNews(*x.run, x.deadline, &news, &done, &outcome)) {
      x.run->cancelled.store(true);
      const absl::Status s = TimeoutStatus(options_.request_timeout);
      SendError(res, ApiErrorFromStatus(s));
      finish(x, s, 504);
      return;
    }
    on_tokens(news);
  }
  if (done && !outcome.ok() && (x.completion_tokens == 0 || !api.stream)) {
    const ApiError e = ApiErrorFromStatus(outcome.status());
    SendError(res, e);
    finish(x, outcome.status(), e.http_status);
    return;
  }
  if (!api.stream) {
    res.set_content(CompletionBody(x.meta, x.text, outcome->finish_reason,
                                   Usage{x.prompt_tokens, x.completion_tokens},
                                   x.want_logprobs ? &x.logprobs : nullptr),
                    kJson);
    finish(x, absl::OkStatus(), 200);
    return;
  }

  // Streaming: the first token(s) are in x.pending; the rest arrive in the provider.
  res.set_header("Cache-Control", "no-cache");
  auto shared = std::make_shared<Exchange>(std::move(x));
  auto first_done = std::make_shared<std::pair<bool, absl::StatusOr<CompletionOutcome>>>(
      done, std::move(outcome));
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, shared, first_done, finish](size_t, httplib::DataSink& sink) mutable {
        Exchange& x = *shared;
        auto write = [&sink](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto client_gone = [&] {
          x.run->cancelled.store(true);
          finish(x, absl::CancelledError("client disconnected"), 499);
          return false;
        };
        if (x.endpoint == Endpoint::kChatCompletions && !write(StreamRoleEvent(x.meta))) {
          return client_gone();
        }
        for (const Exchange::Piece& piece : x.pending) {
          const std::string event =
              TokenStreamEvent(x.meta, piece.text, piece.logprob, piece.text_offset,
                               x.logprobs.tokens_as_ids);
          if (!event.empty() && !write(event)) return client_gone();
        }
        x.pending.clear();
        bool done = first_done->first;
        absl::StatusOr<CompletionOutcome> outcome = std::move(first_done->second);
        while (!done) {
          std::vector<TokenEvent> news;
          if (!WaitForNews(*x.run, x.deadline, &news, &done, &outcome)) {
            x.run->cancelled.store(true);
            const absl::Status s = TimeoutStatus(options_.request_timeout);
            write(StreamErrorEvent(ApiErrorFromStatus(s)));
            write(std::string(kStreamDoneEvent));
            sink.done();
            finish(x, s, 504);
            return true;
          }
          for (TokenEvent& t : news) {
            const absl::Time now = absl::Now();
            tracker_->OnToken(x.id);
            x.last_token_at = now;
            ++x.completion_tokens;
            const int offset = x.text_chars;
            x.text_chars += Utf8Chars(t.text);
            if (!x.want_logprobs) t.logprob.reset();
            const std::string event =
                TokenStreamEvent(x.meta, t.text, t.logprob, offset, x.logprobs.tokens_as_ids);
            if (!event.empty() && !write(event)) return client_gone();
          }
        }
        if (!outcome.ok()) {
          write(StreamErrorEvent(ApiErrorFromStatus(outcome.status())));
          write(std::string(kStreamDoneEvent));
          sink.done();
          finish(x, outcome.status(), ApiErrorFromStatus(outcome.status()).http_status);
          return true;
        }
        bool ok = write(StreamFinishEvent(x.meta, outcome->finish_reason));
        if (ok && x.include_usage) {
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
          shared->run->cancelled.store(true);
          finish(*shared, absl::CancelledError("client disconnected before streaming began"), 499);
        }
      });
}

}  // namespace oscarkv::router
