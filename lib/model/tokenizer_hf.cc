// Tokenizer::FromHfFiles (declared in tokenizer.h): a Hugging Face tokenizer.json into the same
// tables FromGguf fills.
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace oscarkv::model {
namespace {

using Json = nlohmann::json;

// GGUF token types (tokenizer.cc uses the same values).
constexpr int32_t kTypeNormal = 1;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;

// The split regexes of the pre-tokenizers we implement, as tokenizer.json spells them.
constexpr char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool ReadText(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::string TypeOf(const Json& j) {
  auto t = j.is_object() ? j.find("type") : j.end();
  return (t != j.end() && t->is_string()) ? t->get<std::string>() : "";
}

// A token named in tokenizer_config.json: "text" or {"content": "text", ...}; empty if neither.
std::string TokenText(const Json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return "";
}

// Maps tokenizer.json's pre_tokenizer to one we implement.
absl::StatusOr<PreTokenizer> PreTokenizerOf(const Json& pre) {
  const std::string type = TypeOf(pre);
  auto regex_of = [](const Json& split) -> std::string {
    auto p = split.find("pattern");
    if (p == split.end() || !p->is_object()) return "";
    auto r = p->find("Regex");
    return (r != p->end() && r->is_string()) ? r->get<std::string>() : "";
  };
  auto use_regex = [](const Json& bl) {
    auto u = bl.find("use_regex");
    return u == bl.end() || !u->is_boolean() || u->get<bool>();  // tokenizers' default: true
  };
  if (type == "ByteLevel" && use_regex(pre)) return PreTokenizer::kGpt2;
  if (type == "Sequence") {
    auto list = pre.find("pretokenizers");
    if (list != pre.end() && list->is_array() && list->size() == 2) {
      const Json& a = (*list)[0];
      const Json& b = (*list)[1];
      if (TypeOf(a) == "Split" && TypeOf(b) == "ByteLevel" && !use_regex(b)) {
        const std::string re = regex_of(a);
        if (re == kLlama3Regex) return PreTokenizer::kLlama3;
        if (re == kQwen2Regex) return PreTokenizer::kQwen2;
        if (re == kGpt2Regex) return PreTokenizer::kGpt2;
        return absl::UnimplementedError(
            absl::StrCat("tokenizer.json pre-tokenizer regex is not one we implement: ", re));
      }
      auto indiv = a.find("individual_digits");
      if (TypeOf(a) == "Digits" && indiv != a.end() && indiv->is_boolean() && indiv->get<bool>() &&
          TypeOf(b) == "ByteLevel" && use_regex(b)) {
        return PreTokenizer::kSmolLm;
      }
    }
  }
  return absl::UnimplementedError(absl::StrCat(
      "tokenizer.json pre-tokenizer is not one we implement: ", pre.dump().substr(0, 300)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfFiles(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  std::string text;
  if (!ReadText(path, &text)) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a JSON object"));
  }
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", what));
  };
  auto model = j.find("model");
  if (model == j.end() || !model->is_object()) return bad("no model object");
  if (TypeOf(*model) != "BPE") {
    return absl::UnimplementedError(absl::StrCat("tokenizer model '", TypeOf(*model), "' in '",
                                                 path, "' is not supported (only BPE)"));
  }
  const Json pre = j.value("pre_tokenizer", Json());
  const Json decoder = j.value("decoder", Json());
  if (TypeOf(pre) != "ByteLevel" && TypeOf(pre) != "Sequence" && TypeOf(decoder) != "ByteLevel") {
    return absl::UnimplementedError(
        absl::StrCat("'", path, "' is not a byte-level BPE (no ByteLevel pre-tokenizer/decoder)"));
  }
  if (const Json norm = j.value("normalizer", Json()); !norm.is_null() && TypeOf(norm) != "NFC") {
    // NFC is accepted: our callers pass NFC text, on which it is the identity.
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.json normalizer '", TypeOf(norm), "' is not supported"));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  OSCARKV_ASSIGN_OR_RETURN(t->pre_, PreTokenizerOf(pre));

  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) return bad("model.vocab is not an object");
  auto place = [&](const std::string& tok, const Json& id_json, int32_t type) -> absl::Status {
    if (!id_json.is_number_unsigned() || id_json.get<uint64_t>() >= (1u << 24)) {
      return bad(absl::StrCat("token '", tok, "' has a bad id"));
    }
    const size_t id = id_json.get<size_t>();
    if (id >= t->tokens_.size()) {
      t->tokens_.resize(id + 1);
      t->token_types_.resize(id + 1, kTypeNormal);
    }
    t->tokens_[id] = tok;
    t->token_types_[id] = type;
    return absl::OkStatus();
  };
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    OSCARKV_RETURN_IF_ERROR(place(it.key(), it.value(), kTypeNormal));
  }
  if (auto added = j.find("added_tokens"); added != j.end() && added->is_array()) {
    for (const Json& a : *added) {
      auto c = a.find("content");
      auto id = a.find("id");
      if (!a.is_object() || c == a.end() || !c->is_string() || id == a.end()) {
        return bad("malformed added_tokens entry");
      }
      auto sp = a.find("special");
      const bool special = sp != a.end() && sp->is_boolean() && sp->get<bool>();
      OSCARKV_RETURN_IF_ERROR(
          place(c->get<std::string>(), *id, special ? kTypeControl : kTypeUserDefined));
    }
  }
  std::vector<std::string> merges;
  if (auto m = model->find("merges"); m != model->end() && m->is_array()) {
    merges.reserve(m->size());
    for (const Json& x : *m) {
      if (x.is_string()) {
        merges.push_back(x.get<std::string>());
      } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
        merges.push_back(absl::StrCat(x[0].get<std::string>(), " ", x[1].get<std::string>()));
      } else {
        return bad("malformed merges entry");
      }
    }
  }
  // Index first so TokenId works below; Finish() runs at the end.
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < t->tokens_.size(); ++i) ids.emplace(t->tokens_[i], static_cast<int32_t>(i));
  auto id_of = [&](const std::string& s) -> int32_t {
    auto it = ids.find(s);
    return (s.empty() || it == ids.end()) ? -1 : it->second;
  };
  // BOS from a TemplateProcessing post-processor that starts with a special token (Llama 3).
  auto scan_post = [&](const Json& p) {
    if (TypeOf(p) != "TemplateProcessing") return;
    auto single = p.find("single");
    if (single == p.end() || !single->is_array() || single->empty()) return;
    auto st = (*single)[0].find("SpecialToken");
    if (st == (*single)[0].end() || !st->is_object()) return;
    auto tid = st->find("id");
    if (tid != st->end() && tid->is_string() && id_of(tid->get<std::string>()) >= 0) {
      t->bos_id_ = id_of(tid->get<std::string>());
      t->add_bos_ = true;
    }
  };
  if (const Json post = j.value("post_processor", Json()); TypeOf(post) == "Sequence") {
    if (auto ps = post.find("processors"); ps != post.end() && ps->is_array()) {
      for (const Json& p : *ps) scan_post(p);
    }
  } else {
    scan_post(post);
  }
  std::string cfg_text;
  if (ReadText(dir + "/tokenizer_config.json", &cfg_text)) {
    Json cfg = Json::parse(cfg_text, nullptr, /*allow_exceptions=*/false);
    if (cfg.is_object()) {
      if (int32_t id = id_of(TokenText(cfg, "bos_token")); id >= 0) t->bos_id_ = id;
      if (int32_t id = id_of(TokenText(cfg, "eos_token")); id >= 0) t->eos_id_ = id;
      if (auto ab = cfg.find("add_bos_token"); ab != cfg.end() && ab->is_boolean()) {
        t->add_bos_ = ab->get<bool>() && t->bos_id_ >= 0;
      }
      if (auto ct = cfg.find("chat_template"); ct != cfg.end()) {
        if (ct->is_string()) {
          t->chat_template_ = ct->get<std::string>();
        } else if (ct->is_array()) {  // [{"name": "default", "template": "..."}, ...]
          for (const Json& e : *ct) {
            if (e.is_object() && e.contains("name") && e["name"] == "default" &&
                e.contains("template") && e["template"].is_string()) {
              t->chat_template_ = e["template"].get<std::string>();
            }
          }
        }
      }
    }
  }
  if (t->chat_template_.empty()) {
    ReadText(dir + "/chat_template.jinja", &t->chat_template_);  // transformers 5 writes it apart
  }
  t->Finish(merges);
  return t;
}

}  // namespace oscarkv::model
