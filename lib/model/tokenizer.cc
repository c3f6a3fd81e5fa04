#include "lib/model/tokenizer.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace oscarkv::model {
namespace {

struct CodepointRange {
  uint32_t lo, hi;
};
#include "lib/model/unicode_ranges.inc"

template <size_t N>
bool InRanges(const CodepointRange (&r)[N], uint32_t cp) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (cp < r[mid].lo) {
      hi = mid;
    } else if (cp > r[mid].hi) {
      lo = mid + 1;
    } else {
      return true;
    }
  }
  return false;
}

bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(kLetterRanges, cp);
}
bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(kNumberRanges, cp);
}
// Unicode White_Space (what \s means in the tokenizers' regex engines).
bool IsSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}
bool IsOther(uint32_t cp) { return !IsSpace(cp) && !IsLetter(cp) && !IsNumber(cp); }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes one UTF-8 sequence at s[i]; invalid bytes decode as U+FFFD of length 1 so every byte
// stays in exactly one code point.
uint32_t DecodeUtf8(std::string_view s, size_t i, size_t* len) {
  const uint8_t c = static_cast<uint8_t>(s[i]);
  auto cont = [&](size_t k) {
    return i + k < s.size() && (static_cast<uint8_t>(s[i + k]) & 0xC0) == 0x80;
  };
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  if ((c & 0xE0) == 0xC0 && c >= 0xC2 && cont(1)) {
    *len = 2;
    return ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
  }
  if ((c & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    const uint32_t cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) {
      *len = 3;
      return cp;
    }
  }
  if ((c & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
    const uint32_t cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) |
                        ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
    if (cp >= 0x10000 && cp <= 0x10FFFF) {
      *len = 4;
      return cp;
    }
  }
  *len = 1;
  return 0xFFFD;
}

struct Cp {
  uint32_t cp;
  uint32_t off;  // byte offset in the text
};

std::vector<Cp> ToCodepoints(std::string_view s) {
  std::vector<Cp> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = DecodeUtf8(s, i, &len);
    out.push_back({cp, static_cast<uint32_t>(i)});
    i += len;
  }
  return out;
}

uint32_t Lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length (in code points) of the contraction at i ('s 't 're 've 'm 'll 'd), or 0.
size_t Contraction(const std::vector<Cp>& c, size_t i, size_t n, bool any_case) {
  if (c[i].cp != '\'' || i + 1 >= n) return 0;
  auto lc = [&](size_t k) { return any_case ? Lower(c[k].cp) : c[k].cp; };
  const uint32_t a = lc(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < n) {
    const uint32_t b = lc(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// Whitespace run rules shared by both regex families: "\s+(?!\S)|\s+".
size_t WhitespaceMatch(const std::vector<Cp>& c, size_t i, size_t n) {
  size_t k = i;
  while (k < n && IsSpace(c[k].cp)) ++k;
  if (k == n || k - i == 1) return k - i;
  return k - i - 1;  // leave the last space to lead the next word
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t Gpt2Match(const std::vector<Cp>& c, size_t i, size_t n) {
  if (size_t m = Contraction(c, i, n, false)) return m;
  const size_t j = (c[i].cp == ' ' && i + 1 < n) ? i + 1 : i;
  auto run = [&](bool (*pred)(uint32_t)) -> size_t {
    if (!pred(c[j].cp)) return 0;
    size_t k = j;
    while (k < n && pred(c[k].cp)) ++k;
    return k - i;
  };
  if (size_t m = run(IsLetter)) return m;
  if (size_t m = run(IsNumber)) return m;
  if (size_t m = run(IsOther)) return m;
  if (IsSpace(c[i].cp)) return WhitespaceMatch(c, i, n);
  return 1;
}

// Llama 3 / Qwen2:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
size_t Llama3Match(const std::vector<Cp>& c, size_t i, size_t n, size_t max_digits) {
  if (size_t m = Contraction(c, i, n, true)) return m;
  const uint32_t c0 = c[i].cp;
  {
    size_t j = i;
    if (!IsLetter(c0) && c0 != '\r' && c0 != '\n' && !IsNumber(c0) && i + 1 < n &&
        IsLetter(c[i + 1].cp)) {
      j = i + 1;
    }
    if (IsLetter(c[j].cp)) {
      while (j < n && IsLetter(c[j].cp)) ++j;
      return j - i;
    }
  }
  if (IsNumber(c0)) {
    size_t j = i;
    while (j < n && j - i < max_digits && IsNumber(c[j].cp)) ++j;
    return j - i;
  }
  {
    size_t j = (c0 == ' ' && i + 1 < n && IsOther(c[i + 1].cp)) ? i + 1 : i;
    if (IsOther(c[j].cp)) {
      while (j < n && IsOther(c[j].cp)) ++j;
      while (j < n && (c[j].cp == '\r' || c[j].cp == '\n')) ++j;
      return j - i;
    }
  }
  if (IsSpace(c0)) {
    size_t k = i;
    while (k < n && IsSpace(c[k].cp)) ++k;
    size_t last_nl = SIZE_MAX;
    for (size_t q = i; q < k; ++q) {
      if (c[q].cp == '\r' || c[q].cp == '\n') last_nl = q;
    }
    if (last_nl != SIZE_MAX) return last_nl + 1 - i;
    return WhitespaceMatch(c, i, n);
  }
  return 1;
}

// GPT-2's byte-level alphabet: printable bytes map to themselves, the rest to 256 + k.
void BuildByteMap(std::string* byte_to_utf8, std::unordered_map<uint32_t, uint8_t>* cp_to_byte) {
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const uint32_t cp = keep ? b : 256 + extra++;
    byte_to_utf8[b].clear();
    AppendUtf8(cp, &byte_to_utf8[b]);
    (*cp_to_byte)[cp] = static_cast<uint8_t>(b);
  }
}

constexpr int32_t kTypeNormal = 1;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& f) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  OSCARKV_ASSIGN_OR_RETURN(std::string model, f.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer model '", model, "' is not supported (only byte-level BPE, 'gpt2')"));
  }
  OSCARKV_ASSIGN_OR_RETURN(t->tokens_, f.GetStringArray("tokenizer.ggml.tokens"));
  if (f.Find("tokenizer.ggml.token_type")) {
    OSCARKV_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != t->tokens_.size()) {
      return absl::InvalidArgumentError("tokenizer.ggml.token_type length differs from tokens");
    }
    t->token_types_.assign(types.begin(), types.end());
  } else {
    t->token_types_.assign(t->tokens_.size(), kTypeNormal);
  }
  OSCARKV_ASSIGN_OR_RETURN(std::vector<std::string> merges, f.GetStringArray("tokenizer.ggml.merges"));
  std::string pre = "default";
  if (f.Find("tokenizer.ggml.pre")) {
    OSCARKV_ASSIGN_OR_RETURN(pre, f.GetString("tokenizer.ggml.pre"));
  }
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell" ||
      pre == "command-r" || pre == "exaone" || pre == "minerva-7b") {
    t->pre_ = PreTokenizer::kSmolLm;
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "dbrx" || pre == "smaug-bpe") {
    t->pre_ = PreTokenizer::kLlama3;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    t->pre_ = PreTokenizer::kQwen2;
  } else {
    t->pre_ = PreTokenizer::kGpt2;
  }
  auto id_or = [&](const char* key, int32_t dflt) -> int32_t {
    const GgufValue* v = f.Find(key);
    return (v != nullptr && v->IsInteger()) ? static_cast<int32_t>(v->i) : dflt;
  };
  t->bos_id_ = id_or("tokenizer.ggml.bos_token_id", -1);
  t->eos_id_ = id_or("tokenizer.ggml.eos_token_id", -1);
  if (int32_t eot = id_or("tokenizer.ggml.eot_token_id", -1); eot >= 0) t->end_ids_.push_back(eot);
  if (const GgufValue* v = f.Find("tokenizer.ggml.add_bos_token"); v != nullptr) {
    t->add_bos_ = v->b;
  }
  if (f.Find("tokenizer.chat_template")) {
    OSCARKV_ASSIGN_OR_RETURN(t->chat_template_, f.GetString("tokenizer.chat_template"));
  }
  t->Finish(merges);
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::CreateEmpty() {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->Finish({});
  return t;
}

void Tokenizer::Finish(const std::vector<std::string>& merges) {
  Tokenizer* t = this;
  t->merge_rank_.reserve(merges.size() * 2);
  for (size_t i = 0; i < merges.size(); ++i) {
    t->merge_rank_.emplace(merges[i], static_cast<int32_t>(i));
  }
  t->token_to_id_.reserve(t->tokens_.size() * 2);
  for (size_t i = 0; i < t->tokens_.size(); ++i) {
    t->token_to_id_.emplace(t->tokens_[i], static_cast<int32_t>(i));
    if (t->token_types_[i] == kTypeControl || t->token_types_[i] == kTypeUserDefined) {
      if (!t->tokens_[i].empty()) t->specials_.push_back(static_cast<int32_t>(i));
    }
  }
  std::sort(t->specials_.begin(), t->specials_.end(), [&](int32_t a, int32_t b) {
    return t->tokens_[a].size() > t->tokens_[b].size();
  });
  if (t->eos_id_ >= 0) t->end_ids_.push_back(t->eos_id_);
  for (const char* s : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"}) {
    if (int32_t id = t->TokenId(s); id >= 0) t->end_ids_.push_back(id);
  }
  t->chatml_ = t->chat_template_.find("<|im_start|>") != std::string::npos &&
               t->TokenId("<|im_start|>") >= 0;
  if (t->chatml_ && t->chat_template_.find("!= 'system'") != std::string::npos) {
    // The template's default system prompt: '<|im_start|>system\n' ... '<|im_end|>'.
    const std::string open = "<|im_start|>system\n";
    const size_t a = t->chat_template_.find(open);
    if (a != std::string::npos) {
      const size_t b = t->chat_template_.find("<|im_end|>", a);
      if (b != std::string::npos) {
        t->default_system_ = t->chat_template_.substr(a + open.size(), b - a - open.size());
        if (t->default_system_.find("{{") != std::string::npos ||
            t->default_system_.find("{%") != std::string::npos) {
          t->default_system_.clear();
        }
      }
    }
  }
  BuildByteMap(t->byte_to_utf8_, &t->cp_to_byte_);
}

int32_t Tokenizer::TokenId(std::string_view text) const {
  auto it = token_to_id_.find(std::string(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

std::vector<std::string> Tokenizer::PreTokenize(std::string_view text) const {
  std::vector<std::string> words;
  const std::vector<Cp> all = ToCodepoints(text);
  auto split = [&](size_t begin, size_t end) {
    // Within [begin, end) of `all`, using a view whose end is `end`.
    std::vector<Cp> c(all.begin() + begin, all.begin() + end);
    const size_t n = c.size();
    const uint32_t stop = end < all.size() ? all[end].off : static_cast<uint32_t>(text.size());
    for (size_t i = 0; i < n;) {
      size_t m;
      switch (pre_) {
        case PreTokenizer::kLlama3: m = Llama3Match(c, i, n, 3); break;
        case PreTokenizer::kQwen2: m = Llama3Match(c, i, n, 1); break;
        default: m = Gpt2Match(c, i, n); break;
      }
      if (m == 0) m = 1;
      const uint32_t a = c[i].off;
      const uint32_t b = i + m < n ? c[i + m].off : stop;
      words.emplace_back(text.substr(a, b - a));
      i += m;
    }
  };
  if (pre_ == PreTokenizer::kSmolLm) {
    // First split: every \p{N} is its own piece; the rest go through the GPT-2 regex.
    size_t start = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (IsNumber(all[i].cp)) {
        if (i > start) split(start, i);
        split(i, i + 1);
        start = i + 1;
      }
    }
    if (start < all.size()) split(start, all.size());
  } else if (!all.empty()) {
    split(0, all.size());
  }
  return words;
}

void Tokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  std::vector<std::string> sym;
  sym.reserve(word.size());
  for (unsigned char b : word) sym.push_back(byte_to_utf8_[b]);
  // Greedy BPE: repeatedly merge the adjacent pair with the lowest merge rank.
  std::string key;
  while (sym.size() > 1) {
    int32_t best = INT32_MAX;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      key.assign(sym[i]);
      key.push_back(' ');
      key.append(sym[i + 1]);
      auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        best_i = i;
      }
    }
    if (best == INT32_MAX) break;
    sym[best_i] += sym[best_i + 1];
    sym.erase(sym.begin() + best_i + 1);
  }
  for (const std::string& s : sym) {
    auto it = token_to_id_.find(s);
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      continue;
    }
    // Not in the vocabulary: fall back to one token per byte of the mapped symbol.
    const std::vector<Cp> cps = ToCodepoints(s);
    for (const Cp& c : cps) {
      auto b = cp_to_byte_.find(c.cp);
      if (b == cp_to_byte_.end()) continue;
      auto t = token_to_id_.find(byte_to_utf8_[b->second]);
      if (t != token_to_id_.end()) out->push_back(t->second);
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
  auto encode_plain = [&](std::string_view s) {
    for (const std::string& w : PreTokenize(s)) EncodeWord(w, &out);
  };
  if (!parse_special || specials_.empty()) {
    encode_plain(text);
    return out;
  }
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t hit = -1;
    for (int32_t id : specials_) {  // longest first
      const std::string& s = tokens_[id];
      if (text.compare(i, s.size(), s) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) encode_plain(text.substr(start, i - start));
    out.push_back(hit);
    i += tokens_[hit].size();
    start = i;
  }
  if (start < text.size()) encode_plain(text.substr(start));
  return out;
}

std::string Tokenizer::TokenToPiece(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(tokens_.size())) return "";
  const std::string& t = tokens_[id];
  if (token_types_[id] == kTypeControl || token_types_[id] == kTypeUserDefined) return t;
  std::string out;
  for (const Cp& c : ToCodepoints(t)) {
    auto it = cp_to_byte_.find(c.cp);
    if (it != cp_to_byte_.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      AppendUtf8(c.cp, &out);
    }
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && id >= 0 && id < static_cast<int32_t>(tokens_.size()) &&
        token_types_[id] == kTypeControl) {
      continue;
    }
    out += TokenToPiece(id);
  }
  return out;
}

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplate(std::span<const ChatMessage> messages,
                                                         bool add_generation_prompt) const {
  if (!chatml_) {
    return absl::UnimplementedError(
        "the model's chat template is not ChatML-style (<|im_start|>role ... <|im_end|>)");
  }
  std::string out;
  if (!default_system_.empty() && (messages.empty() || messages[0].role != "system")) {
    absl::StrAppend(&out, "<|im_start|>system\n", default_system_, "<|im_end|>\n");
  }
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace oscarkv::model
