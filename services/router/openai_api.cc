#include "services/router/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace oscarkv::router {
namespace {

// Ordered: keys stay in the order written (OpenAI's field order; top_logprobs most likely first).
using json = nlohmann::ordered_json;

// Serialises without throwing: invalid UTF-8 (a backend bug) is replaced, never fatal.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json NullIfEmpty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// Whether `text`'s arrays and objects nest at most `max_depth` deep (brackets inside strings,
// escaped quotes included, do not count). Scanned before parsing, which would recurse that deep.
bool NestingWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// A request value as an error message shows it: numbers, booleans and null as written, strings
// cut to 40 bytes, arrays and objects by kind only. dump() of a client's array or object would
// copy all of it into the message, and recurses: deeply nested input overflows the stack.
std::string Shown(const json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  if (v.is_string() && v.get_ref<const std::string&>().size() > 40) {
    return Dump(json(v.get_ref<const std::string&>().substr(0, 40))) + "...";
  }
  return Dump(v);
}

// An integer JSON value as int64, unsigned values above its range saturated (get<int64_t>()
// would wrap them negative, into range checks and messages).
int64_t Int64Of(const json& v) {
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::numeric_limits<int64_t>::max();
  }
  return v.get<int64_t>();
}

ApiError Invalid(std::string message, std::string param, std::string code = "") {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

// Reads an optional number field in [lo, hi] ((lo, hi] when lo_open). Returns an error for a
// non-number, non-finite or out-of-range value.
std::optional<ApiError> ReadNumber(const json& body, const char* name, double lo, bool lo_open,
                                   double hi, double* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return Invalid(absl::StrCat("'", name, "' must be a number"), name);
  const double v = it->get<double>();
  const bool below = lo_open ? !(v > lo) : !(v >= lo);
  if (below || !(v <= hi) || !std::isfinite(v)) {
    return Invalid(absl::StrCat("'", name, "' must be ", lo_open ? "in (" : "in [", lo, ", ", hi,
                                "], got ", Shown(*it)),
                   name);
  }
  *out = v;
  return std::nullopt;
}

// `echo`: 0 is allowed too (the prompt back, nothing generated); the error for 0 points to echo
// only on the endpoint that has it.
// An optional integer field in [lo, hi]; *out is left as is when absent or null.
std::optional<ApiError> ReadInt(const json& body, const char* name, int lo, int hi, int* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || Int64Of(*it) < lo || Int64Of(*it) > hi) {
    return Invalid(absl::StrCat("'", name, "' must be an integer in [", lo, ", ", hi, "], got ",
                                Shown(*it)),
                   name);
  }
  *out = static_cast<int>(Int64Of(*it));
  return std::nullopt;
}

std::optional<ApiError> ReadMaxTokens(const json& body, const char* name, int limit,
                                      Endpoint endpoint, bool echo, std::optional<int>* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    return Invalid(absl::StrCat("'", name, "' must be an integer"), name);
  }
  const int64_t v = Int64Of(*it);
  const int least = echo ? 0 : 1;
  if (v < least || v > limit) {
    const bool echo_would_allow_zero = v == 0 && endpoint == Endpoint::kCompletions;
    return Invalid(absl::StrCat("'", name, "' must be in [", least, ", ", limit, "], got ",
                                Shown(*it), echo_would_allow_zero ? " (0 only with echo)" : ""),
                   name);
  }
  *out = static_cast<int>(v);
  return std::nullopt;
}

// /v1/completions' echo (a boolean; null = false). Chat has none in OpenAI's API (vLLM's chat
// echo, of the last message, is not supported).
std::optional<ApiError> ReadEcho(const json& body, Endpoint endpoint, bool* out) {
  auto it = body.find("echo");
  if (it == body.end() || it->is_null() || *it == false) return std::nullopt;
  if (endpoint == Endpoint::kChatCompletions) {
    return Invalid("'echo' is not supported on chat completions", "echo", "unsupported_value");
  }
  if (!it->is_boolean()) return Invalid("'echo' must be a boolean", "echo");
  *out = true;
  return std::nullopt;
}

// vLLM's extension: -1 (and 0) mean no top-k filter.
std::optional<ApiError> ReadTopK(const json& body, int* out) {
  auto it = body.find("top_k");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return Invalid("'top_k' must be an integer", "top_k");
  const int64_t v = Int64Of(*it);
  if (v < -1 || v > std::numeric_limits<int32_t>::max()) {
    return Invalid(
        absl::StrCat("'top_k' must be -1, 0 (off) or a positive integer, got ", Shown(*it)),
        "top_k");
  }
  *out = v <= 0 ? 0 : static_cast<int>(v);
  return std::nullopt;
}

// A list of token ids (non-empty, each in int32 range) into `out`.
std::optional<ApiError> ReadTokenIds(const json& p, std::vector<int32_t>* out) {
  if (p.empty()) return Invalid("'prompt' must not be empty", "prompt");
  for (const json& x : p) {
    if (!x.is_number_integer()) return Invalid("'prompt' token ids must be integers", "prompt");
    const int64_t v = Int64Of(x);
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      return Invalid(absl::StrCat("token id ", Shown(x), " is outside [0, ",
                                  std::numeric_limits<int32_t>::max(), "]"),
                     "prompt");
    }
    out->push_back(static_cast<int32_t>(v));
  }
  return std::nullopt;
}

// Several prompts: a list of (non-empty) strings, or a list of token-id lists.
std::optional<ApiError> ReadBatchedPrompts(const json& p, std::vector<PromptInput>* prompts) {
  if (p.size() > static_cast<size_t>(kMaxTotalChoices)) {
    return Invalid(absl::StrCat("at most ", kMaxTotalChoices, " prompts per request"), "prompt");
  }
  for (const json& x : p) {
    PromptInput one;
    if (x.is_string() && p[0].is_string()) {
      if (x.get_ref<const std::string&>().empty()) {
        return Invalid("'prompt' must not hold an empty prompt", "prompt");
      }
      one.text = x.get<std::string>();
    } else if (x.is_array() && p[0].is_array()) {
      one.token_ids.emplace();
      if (auto e = ReadTokenIds(x, &*one.token_ids)) return e;
    } else {
      return Invalid("batched 'prompt' must be a list of strings or a list of token-id lists",
                     "prompt");
    }
    prompts->push_back(std::move(one));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadPrompt(const json& body, std::vector<PromptInput>* prompts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return Invalid("'prompt' is required", "prompt");
  const json& p = *it;
  prompts->emplace_back();
  PromptInput* prompt = &prompts->back();
  if (p.is_string()) {
    if (p.get_ref<const std::string&>().empty()) {
      return Invalid("'prompt' must not be empty", "prompt");
    }
    prompt->text = p.get<std::string>();
    return std::nullopt;
  }
  if (p.is_array()) {
    if (p.empty()) return Invalid("'prompt' must not be empty", "prompt");
    if (std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
      prompt->token_ids.emplace();
      return ReadTokenIds(p, &*prompt->token_ids);
    }
    if (p[0].is_string() || p[0].is_array()) {
      prompts->clear();
      return ReadBatchedPrompts(p, prompts);
    }
  }
  return Invalid("'prompt' must be a string, a list of token ids, or a batch of either",
                 "prompt");
}

std::optional<ApiError> ReadMessages(const json& body, std::vector<PromptInput>* prompts) {
  prompts->emplace_back();
  PromptInput* prompt = &prompts->back();
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return Invalid("'messages' is required", "messages");
  if (!it->is_array() || it->empty()) {
    return Invalid("'messages' must be a non-empty array of {role, content} objects", "messages");
  }
  static const std::vector<std::string> kRoles = {"system", "developer", "user", "assistant",
                                                  "tool"};
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(absl::StrCat("'", param, "' must be an object"), param);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() ||
        std::find(kRoles.begin(), kRoles.end(), role->get<std::string>()) == kRoles.end()) {
      return Invalid(absl::StrCat("'", param, ".role' must be one of ", absl::StrJoin(kRoles, ", ")),
                     param + ".role");
    }
    ChatMessage msg;
    msg.role = role->get<std::string>();
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // An assistant turn that only made tool calls has no content.
      if (msg.role != "assistant") {
        return Invalid(absl::StrCat("'", param, ".content' is required"), param + ".content");
      }
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || *type != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
          return Invalid(absl::StrCat("'", param,
                                      ".content' parts must be {\"type\": \"text\", \"text\": ...}; "
                                      "only text is supported"),
                         param + ".content");
        }
        // Parts join with a newline, as vLLM's chat parser does.
        if (&part != &content->front()) msg.content += '\n';
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return Invalid(absl::StrCat("'", param, ".content' must be a string or a list of text parts"),
                     param + ".content");
    }
    messages.push_back(std::move(msg));
  }
  prompt->messages = std::move(messages);
  return std::nullopt;
}

std::optional<ApiError> ReadStop(const json& body, std::vector<std::string>* stop) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (!it->get_ref<const std::string&>().empty()) stop->push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (it->is_array() && it->size() <= 4 &&
      std::all_of(it->begin(), it->end(), [](const json& s) { return s.is_string(); })) {
    for (const json& s : *it) {
      if (!s.get_ref<const std::string&>().empty()) stop->push_back(s.get<std::string>());
    }
    return std::nullopt;
  }
  return Invalid("'stop' must be a string or a list of at most 4 strings", "stop");
}

const char* ObjectName(Endpoint e, bool chunk) {
  if (e == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json Envelope(const ResponseMeta& meta, bool chunk) {
  json j = {{"id", meta.id},
            {"object", ObjectName(meta.endpoint, chunk)},
            {"created", meta.created},
            {"model", meta.model}};
  if (!meta.session_id.empty()) j["session_id"] = meta.session_id;
  if (chunk && meta.stream_usage) j["usage"] = nullptr;
  return j;
}

std::string Sse(const json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

double FiniteLogprob(double logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

json Bytes(const std::string& piece) {
  json b = json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

// vLLM's prompt_logprobs: per prompt token null (the first) or {"<id>": {logprob, rank,
// decoded_token}}, the prompt's token first, then its alternatives (ranked 1..k).
json PromptLogprobsJson(const std::vector<TokenLogprob>& tokens) {
  json out = json::array();
  for (const TokenLogprob& t : tokens) {
    if (!t.scored) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    entry[std::to_string(t.token_id)] = {{"logprob", FiniteLogprob(t.logprob)},
                                         {"rank", t.rank},
                                         {"decoded_token", t.piece}};
    for (size_t k = 0; k < t.top.size(); ++k) {
      const std::string id = std::to_string(t.top[k].token_id);
      if (entry.contains(id)) continue;
      entry[id] = {{"logprob", FiniteLogprob(t.top[k].logprob)},
                   {"rank", static_cast<int64_t>(k + 1)},
                   {"decoded_token", t.top[k].piece}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

// The choice's "logprobs" in the endpoint's shape (CompletionBody in openai_api.h).
json LogprobsJson(Endpoint endpoint, const ResponseLogprobs& logprobs) {
  auto name = [&](const std::string& piece, int32_t id) {
    return logprobs.tokens_as_ids ? absl::StrCat("token_id:", id) : piece;
  };
  if (endpoint == Endpoint::kCompletions) {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
         offsets = json::array();
    for (size_t i = 0; i < logprobs.tokens.size(); ++i) {
      const TokenLogprob& t = logprobs.tokens[i];
      tokens.push_back(name(t.piece, t.token_id));
      offsets.push_back(i < logprobs.text_offsets.size() ? logprobs.text_offsets[i] : 0);
      if (!t.scored) {
        token_logprobs.push_back(nullptr);
        top.push_back(nullptr);
        continue;
      }
      token_logprobs.push_back(FiniteLogprob(t.logprob));
      // The legacy API always lists the chosen token too: up to logprobs + 1 entries.
      json alternatives = json::object();
      for (const TokenAlternative& a : t.top) {
        alternatives[name(a.piece, a.token_id)] = FiniteLogprob(a.logprob);
      }
      alternatives[name(t.piece, t.token_id)] = FiniteLogprob(t.logprob);
      top.push_back(std::move(alternatives));
    }
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top},
            {"text_offset", offsets}};
  }
  json content = json::array();
  for (const TokenLogprob& t : logprobs.tokens) {
    json alternatives = json::array();
    for (const TokenAlternative& a : t.top) {
      alternatives.push_back({{"token", name(a.piece, a.token_id)},
                              {"logprob", FiniteLogprob(a.logprob)},
                              {"bytes", Bytes(a.piece)}});
    }
    content.push_back({{"token", name(t.piece, t.token_id)},
                       {"logprob", FiniteLogprob(t.logprob)},
                       {"bytes", Bytes(t.piece)},
                       {"top_logprobs", std::move(alternatives)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json StreamChoice(const ResponseMeta& meta, const std::string* text, const json& finish,
                  const ResponseLogprobs* logprobs, int index) {
  const json lp = logprobs ? LogprobsJson(meta.endpoint, *logprobs) : json(nullptr);
  if (meta.endpoint == Endpoint::kCompletions) {
    return {{"index", index}, {"text", text ? *text : ""}, {"logprobs", lp},
            {"finish_reason", finish}};
  }
  json delta = json::object();
  if (text) delta["content"] = *text;
  return {{"index", index}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", finish}};
}

// Fields whose request the server cannot honour get an error rather than being dropped: a
// client that sends tools or asks for JSON output must not silently get plain text. Empty
// tools, tool_choice "none" and response_format "text" mean nothing and pass.
std::optional<ApiError> RejectUnsupportedFeatures(const json& body) {
  auto present = [&](const char* name) {
    auto it = body.find(name);
    return it != body.end() && !it->is_null() && !(it->is_array() && it->empty());
  };
  auto tool_choice = body.find("tool_choice");
  const bool choice_none = tool_choice != body.end() && *tool_choice == "none";
  if (present("tool_choice") && !choice_none && *tool_choice != "auto") {
    return Invalid("'tool_choice' other than \"none\" or \"auto\" is not supported: the served "
                   "model's chat template has no tool-call format",
                   "tool_choice", "unsupported_value");
  }
  for (const char* name : {"tools", "functions"}) {
    if (present(name) && !choice_none) {
      return Invalid(absl::StrCat("'", name, "' (tool calling) is not supported: the served "
                                  "model's chat template has no tool-call format; describe the "
                                  "tools in a system message, or send tool_choice \"none\""),
                     name, "unsupported_value");
    }
  }
  if (auto it = body.find("suffix");
      it != body.end() && !it->is_null() && !(it->is_string() && it->get_ref<const std::string&>().empty())) {
    return Invalid("'suffix' (insertion) is not supported", "suffix", "unsupported_value");
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    const bool text = it->is_object() && it->value("type", "") == "text";
    if (!text) {
      return Invalid("'response_format' other than {\"type\": \"text\"} (JSON or schema output) "
                     "is not supported",
                     "response_format", "unsupported_value");
    }
  }
  return std::nullopt;
}

// OpenAI's shape: {"<token id>": bias in [-100, 100], ...}.
std::optional<ApiError> ReadLogitBias(const json& body,
                                      std::vector<std::pair<int32_t, double>>* out) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    return Invalid("'logit_bias' must be an object of token id -> bias", "logit_bias");
  }
  constexpr size_t kMaxEntries = 1024;
  if (it->size() > kMaxEntries) {
    return Invalid(absl::StrCat("'logit_bias' may hold at most ", kMaxEntries, " tokens"),
                   "logit_bias");
  }
  for (const auto& [key, value] : it->items()) {
    int32_t token = 0;
    if (!absl::SimpleAtoi(key, &token) || token < 0) {
      return Invalid(absl::StrCat("'logit_bias' keys must be token ids, got '", key, "'"),
                     "logit_bias");
    }
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100)) {
      return Invalid(absl::StrCat("'logit_bias' of token ", key, " must be a number in [-100, "
                                  "100], got ", Shown(value)),
                     "logit_bias");
    }
    out->emplace_back(token, value.get<double>());
  }
  return std::nullopt;
}

// completions: an integer in [0, 20] (false/null = off); chat: a boolean, with top_logprobs.
std::optional<ApiError> ReadLogprobs(const json& body, Endpoint endpoint, int* out) {
  auto lp = body.find("logprobs");
  auto top = body.find("top_logprobs");
  const bool has_top = top != body.end() && !top->is_null();
  auto in_range = [](const json& v) {
    return v.is_number_integer() && Int64Of(v) >= 0 && Int64Of(v) <= kMaxTopLogprobs;
  };
  const std::string range = absl::StrCat("[0, ", kMaxTopLogprobs, "]");
  if (endpoint == Endpoint::kCompletions) {
    if (has_top) return Invalid("'top_logprobs' is a chat field; use 'logprobs'", "top_logprobs");
    if (lp == body.end() || lp->is_null() || *lp == false) return std::nullopt;
    if (!in_range(*lp)) {
      return Invalid(absl::StrCat("'logprobs' must be an integer in ", range, ", got ", Shown(*lp)),
                     "logprobs");
    }
    *out = static_cast<int>(Int64Of(*lp));
    return std::nullopt;
  }
  const bool on = lp != body.end() && !lp->is_null() && *lp != false;
  if (on && !lp->is_boolean()) return Invalid("'logprobs' must be a boolean", "logprobs");
  if (has_top) {
    if (!in_range(*top)) {
      return Invalid(absl::StrCat("'top_logprobs' must be an integer in ", range, ", got ",
                                  Shown(*top)),
                     "top_logprobs");
    }
    if (!on) return Invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  }
  if (on) *out = has_top ? static_cast<int>(Int64Of(*top)) : 0;
  return std::nullopt;
}

}  // namespace

std::string ApiErrorBody(const ApiError& e) {
  return Dump({{"error",
                {{"message", e.message},
                 {"type", e.type},
                 {"param", NullIfEmpty(e.param)},
                 {"code", NullIfEmpty(e.code)}}}});
}

ApiError ApiErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e.http_status = 400;
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.code = "not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "server_overloaded";
      e.code = "overloaded";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      e.code = "timeout";
      break;
    case absl::StatusCode::kUnimplemented:
      e.http_status = 501;
      e.code = "unsupported";
      break;
    case absl::StatusCode::kCancelled:
      e.http_status = 499;
      e.code = "cancelled";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

ParseResult ParseApiRequest(Endpoint endpoint, std::string_view content_type,
                            std::string_view body_text, std::string_view session_header,
                            const ApiLimits& limits) {
  ParseResult r;
  ApiRequest& req = r.request;
  req.endpoint = endpoint;
  // "application/json; charset=utf-8" is fine; anything else is not.
  const std::string media(content_type.substr(0, content_type.find(';')));
  if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(media), "application/json")) {
    ApiError e = Invalid(absl::StrCat("Content-Type must be application/json, got '",
                                      std::string(content_type), "'"),
                         "", "unsupported_media_type");
    e.http_status = 415;
    r.error = e;
    return r;
  }
  if (!NestingWithin(body_text, kMaxJsonDepth)) {
    r.error = Invalid(absl::StrCat("The JSON body nests arrays and objects more than ",
                                   kMaxJsonDepth, " levels deep"),
                      "", "invalid_json");
    return r;
  }
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    r.error = Invalid("We could not parse the JSON body of your request: malformed JSON", "",
                      "invalid_json");
    return r;
  }
  if (!body.is_object()) {
    r.error = Invalid("The request body must be a JSON object", "", "invalid_json");
    return r;
  }
  auto model = body.find("model");
  if (model == body.end() || !model->is_string() || model->get_ref<const std::string&>().empty()) {
    r.error = Invalid("'model' is required and must be a non-empty string", "model");
    return r;
  }
  req.model = model->get<std::string>();
  std::optional<ApiError> e = endpoint == Endpoint::kCompletions ? ReadPrompt(body, &req.prompts)
                                                                 : ReadMessages(body, &req.prompts);
  if (!e) e = ReadEcho(body, endpoint, &req.echo);
  if (!e) {
    e = ReadMaxTokens(body, "max_tokens", limits.max_tokens_limit, endpoint, req.echo,
                      &req.max_tokens);
  }
  // Chat's max_completion_tokens replaces the deprecated max_tokens: it wins when both are set.
  if (!e && endpoint == Endpoint::kChatCompletions) {
    e = ReadMaxTokens(body, "max_completion_tokens", limits.max_tokens_limit, endpoint, false,
                      &req.max_tokens);
  }
  if (!e) e = ReadNumber(body, "temperature", 0, false, 2, &req.temperature);
  if (!e) e = ReadNumber(body, "top_p", 0, true, 1, &req.top_p);
  // The workers take top_p as a float, with 0 meaning unset (1); a positive value below the
  // smallest float would round to that. The smallest float keeps its meaning (top token only).
  req.top_p = std::max(req.top_p, static_cast<double>(std::numeric_limits<float>::min()));
  if (!e) e = ReadNumber(body, "presence_penalty", -2, false, 2, &req.presence_penalty);
  if (!e) e = ReadNumber(body, "frequency_penalty", -2, false, 2, &req.frequency_penalty);
  if (!e) e = ReadTopK(body, &req.top_k);
  if (!e) e = ReadLogitBias(body, &req.logit_bias);
  if (!e) e = ReadStop(body, &req.stop);
  if (e) {
    r.error = e;
    return r;
  }
  if (auto e = ReadInt(body, "n", 1, kMaxChoices, &req.n)) {
    r.error = *e;
    return r;
  }
  if (req.n * req.prompts.size() > static_cast<size_t>(kMaxTotalChoices)) {
    r.error = Invalid(absl::StrCat("prompts x n must be at most ", kMaxTotalChoices, ", got ",
                                   req.prompts.size(), " x ", req.n),
                      "n");
    return r;
  }
  // best_of = n is n; more would need ranking the extra completions, which is not supported.
  if (auto it = body.find("best_of"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || Int64Of(*it) < 1) {
      r.error = Invalid("'best_of' must be a positive integer", "best_of");
      return r;
    }
    if (Int64Of(*it) != req.n) {
      r.error = Invalid("'best_of' other than n is not supported", "best_of",
                        "unsupported_value");
      return r;
    }
  }
  if (std::optional<ApiError> e = RejectUnsupportedFeatures(body)) {
    r.error = e;
    return r;
  }
  if (std::optional<ApiError> e = ReadLogprobs(body, endpoint, &req.logprobs)) {
    r.error = e;
    return r;
  }
  if (auto e = ReadInt(body, "prompt_logprobs", 0, kMaxTopLogprobs, &req.prompt_logprobs)) {
    r.error = *e;
    return r;
  }
  for (auto [name, out] : {std::pair{"return_tokens_as_token_ids", &req.return_tokens_as_token_ids},
                           {"ignore_eos", &req.ignore_eos}}) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_boolean()) {
      r.error = Invalid(absl::StrCat("'", name, "' must be a boolean"), name);
      return r;
    }
    *out = it->get<bool>();
  }
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    constexpr size_t kMaxStopTokens = 64;
    const bool ids = it->is_array() && it->size() <= kMaxStopTokens &&
                     std::all_of(it->begin(), it->end(), [](const json& t) {
                       return t.is_number_integer() && Int64Of(t) >= 0 &&
                              Int64Of(t) <= std::numeric_limits<int32_t>::max();
                     });
    if (!ids) {
      r.error = Invalid(absl::StrCat("'stop_token_ids' must be a list of up to ", kMaxStopTokens,
                                     " token ids"),
                        "stop_token_ids");
      return r;
    }
    for (const json& t : *it) req.stop_token_ids.push_back(static_cast<int32_t>(Int64Of(t)));
  }
  if (auto e = ReadInt(body, "min_tokens", 0, limits.max_tokens_limit, &req.min_tokens)) {
    r.error = *e;
    return r;
  }
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) {
      r.error = Invalid(absl::StrCat("'seed' must be a 64-bit integer, got ", Shown(*it)), "seed");
      return r;
    }
    req.seed = it->is_number_unsigned() ? it->get<uint64_t>()
                                        : static_cast<uint64_t>(it->get<int64_t>());
  }
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      r.error = Invalid("'stream' must be a boolean", "stream");
      return r;
    }
    req.stream = it->get<bool>();
  }
  if (req.stream && req.prompt_logprobs >= 0) {  // as vLLM: they would not fit one chunk
    r.error = Invalid("'prompt_logprobs' is not available with 'stream'", "prompt_logprobs",
                      "unsupported_value");
    return r;
  }
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      r.error = Invalid("'stream_options' must be an object", "stream_options");
      return r;
    }
    if (!req.stream) {
      r.error = Invalid("'stream_options' is only allowed when 'stream' is true", "stream_options");
      return r;
    }
    auto u = it->find("include_usage");
    if (u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) {
        r.error = Invalid("'stream_options.include_usage' must be a boolean",
                          "stream_options.include_usage");
        return r;
      }
      req.include_usage = u->get<bool>();
    }
  }
  if (auto it = body.find("session_id"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) {
      r.error = Invalid("'session_id' must be a string", "session_id");
      return r;
    }
    req.session_id = it->get<std::string>();
  }
  if (!session_header.empty()) {
    if (!req.session_id.empty() && req.session_id != session_header) {
      r.error = Invalid("'session_id' and the X-Session-Id header disagree", "session_id");
      return r;
    }
    req.session_id = std::string(session_header);
  }
  if (req.session_id.size() > 256) {
    r.error = Invalid("'session_id' is longer than 256 bytes", "session_id");
    return r;
  }
  if (auto it = body.find("codec"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) {
      r.error = Invalid("'codec' must be a string", "codec");
      return r;
    }
    if (!limits.allow_codec_override) {
      r.error = Invalid("choosing a codec per request is disabled on this server", "codec",
                        "unsupported_value");
      return r;
    }
    req.codec = it->get<std::string>();
    if (std::find(limits.allowed_codecs.begin(), limits.allowed_codecs.end(), req.codec) ==
        limits.allowed_codecs.end()) {
      r.error = Invalid(absl::StrCat("unknown or disallowed codec '", req.codec, "'; allowed: ",
                                     absl::StrJoin(limits.allowed_codecs, ", ")),
                        "codec");
      return r;
    }
  }
  return r;
}

std::string_view FinishReasonName(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : "length";
}

std::string CompletionBody(const ResponseMeta& meta, const std::string& text, FinishReason reason,
                           const Usage& usage, const ResponseLogprobs* logprobs) {
  return CompletionBody(meta, std::vector<ChoiceBody>{{text, reason, logprobs}}, usage);
}

std::string CompletionBody(const ResponseMeta& meta, const std::vector<ChoiceBody>& choices,
                           const Usage& usage) {
  json j = Envelope(meta, /*chunk=*/false);
  j["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceBody& c = choices[i];
    json choice = {
        {"index", static_cast<int>(i)},
        {"logprobs", c.logprobs ? LogprobsJson(meta.endpoint, *c.logprobs) : json(nullptr)},
        {"finish_reason", FinishReasonName(c.reason)}};
    if (meta.endpoint == Endpoint::kCompletions) {
      choice["text"] = c.text;
      if (c.prompt_logprobs) choice["prompt_logprobs"] = PromptLogprobsJson(*c.prompt_logprobs);
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    }
    j["choices"].push_back(std::move(choice));
  }
  // vLLM puts chat's at the top: the choices share the prompt.
  if (meta.endpoint == Endpoint::kChatCompletions && !choices.empty() &&
      choices[0].prompt_logprobs) {
    j["prompt_logprobs"] = PromptLogprobsJson(*choices[0].prompt_logprobs);
  }
  j["usage"] = {{"prompt_tokens", usage.prompt_tokens},
                {"completion_tokens", usage.completion_tokens},
                {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return Dump(j);
}

std::string StreamTextEvent(const ResponseMeta& meta, const std::string& text,
                            const ResponseLogprobs* logprobs, int index) {
  json j = Envelope(meta, true);
  j["choices"] = json::array({StreamChoice(meta, &text, nullptr, logprobs, index)});
  return Sse(j);
}

std::string StreamRoleEvent(const ResponseMeta& meta, int index) {
  json j = Envelope(meta, true);
  j["choices"] = json::array({{{"index", index},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return Sse(j);
}

std::string StreamFinishEvent(const ResponseMeta& meta, FinishReason reason, int index) {
  json j = Envelope(meta, true);
  j["choices"] =
      json::array({StreamChoice(meta, nullptr, FinishReasonName(reason), nullptr, index)});
  return Sse(j);
}

std::string StreamUsageEvent(const ResponseMeta& meta, const Usage& usage) {
  json j = Envelope(meta, true);
  j["choices"] = json::array();
  j["usage"] = {{"prompt_tokens", usage.prompt_tokens},
                {"completion_tokens", usage.completion_tokens},
                {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return Sse(j);
}

std::string StreamErrorEvent(const ApiError& error) {
  return absl::StrCat("data: ", ApiErrorBody(error), "\n\n");
}

namespace {
json ModelJson(const ModelInfo& m) {
  return {{"id", m.id},
          {"object", "model"},
          {"created", m.created_unix_s},
          {"owned_by", m.owned_by},
          {"max_model_len", m.context_length}};
}
}  // namespace

std::string ModelsBody(const std::vector<ModelInfo>& models) {
  json data = json::array();
  for (const ModelInfo& m : models) data.push_back(ModelJson(m));
  return Dump({{"object", "list"}, {"data", data}});
}

std::string ModelBody(const ModelInfo& model) { return Dump(ModelJson(model)); }

}  // namespace oscarkv::router
