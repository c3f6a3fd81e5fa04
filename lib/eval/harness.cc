#include "lib/eval/harness.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/eval/metrics.h"
#include "lib/eval/niah.h"
#include "lib/eval/teacher_forcing.h"
#include "lib/eval/text_overlap.h"
#include "lib/engine/quant_kv_cache.h"
#include "lib/model/forward_cpu.h"
#include "lib/quant/codec_spec.h"
#include "lib/quant/three_tier_cache.h"
#include "nlohmann/json.hpp"

namespace oscarkv::eval {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

#ifndef OSCARKV_SOURCE_DIR
#define OSCARKV_SOURCE_DIR "."
#endif

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string FindPath(const std::string& rel) {
  if (fs::exists(rel)) return rel;
  std::string alt = std::string(OSCARKV_SOURCE_DIR) + "/" + rel;
  if (fs::exists(alt)) return alt;
  return rel;
}

std::string Fmt(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

// Progress bar with ETA on stderr, weighted by work units.
class Progress {
 public:
  Progress(std::string phase, double total, bool enabled)
      : phase_(std::move(phase)), total_(total), enabled_(enabled), start_(Clock::now()) {}
  void Advance(double units, const std::string& what) {
    done_ += units;
    if (!enabled_) return;
    const double el = std::chrono::duration<double>(Clock::now() - start_).count();
    const double frac = total_ > 0 ? std::min(1.0, done_ / total_) : 1.0;
    const double eta = frac > 0 ? el * (1 - frac) / frac : -1;
    const int width = 30, fill = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r%-7s [%s%s] %5.1f%% elapsed %s ETA %s  %-40s", phase_.c_str(),
                 std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                 100 * frac, Fmt(el).c_str(), Fmt(eta).c_str(), what.substr(0, 40).c_str());
    std::fflush(stderr);
  }
  void Finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  std::string phase_;
  double total_, done_ = 0;
  bool enabled_;
  Clock::time_point start_;
};

struct Text {
  std::string path;
  uint64_t hash = 0;
  std::vector<int32_t> tokens;
};

absl::StatusOr<Text> LoadText(const model::Model& model, const std::string& path) {
  Text t;
  t.path = path;
  OSCARKV_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  t.hash = ContentHash(bytes);
  t.tokens = model.tokenizer().Encode(bytes, /*add_special=*/false, /*parse_special=*/false);
  return t;
}

Json EstimateJson(const Estimate& e) {
  Json j;
  j["mean"] = e.mean;
  j["ci95"] = {e.lo, e.hi};
  j["windows"] = e.n;
  return j;
}

// Sums over the scored positions of one window.
struct WindowSums {
  double dnll = 0, kl = 0, agree = 0, nll_ref = 0, nll_codec = 0;
  int64_t n = 0;
  void Add(const PositionScore& s) {
    dnll += s.nll_codec - s.nll_ref;
    kl += s.kl;
    agree += s.top1_agree ? 1 : 0;
    nll_ref += s.nll_ref;
    nll_codec += s.nll_codec;
    ++n;
  }
};

struct PerWindow {
  std::vector<double> dnll, kl, agree, nll_ref, nll_codec;
  int64_t positions = 0;
  void Add(const WindowSums& s) {
    if (s.n == 0) return;
    dnll.push_back(s.dnll / s.n);
    kl.push_back(s.kl / s.n);
    agree.push_back(s.agree / s.n);
    nll_ref.push_back(s.nll_ref / s.n);
    nll_codec.push_back(s.nll_codec / s.n);
    positions += s.n;
  }
  Json ToJson() const {
    Json j;
    j["scored_positions"] = positions;
    j["delta_nll"] = EstimateJson(BootstrapMean(dnll));
    j["token_kl"] = EstimateJson(BootstrapMean(kl));
    j["top1_agreement"] = EstimateJson(BootstrapMean(agree));
    const Estimate nr = BootstrapMean(nll_ref), nc = BootstrapMean(nll_codec);
    j["nll"] = EstimateJson(nc);
    j["perplexity"] = std::exp(nc.mean);
    j["reference_nll"] = nr.mean;
    j["reference_perplexity"] = std::exp(nr.mean);
    return j;
  }
};

struct CodecCell {  // one (codec, context)
  PerWindow all, ge1024;
  double bits = 0, bits_allocated = 0;
  std::vector<LayerFidelity> fidelity_sum;
  int fidelity_n = 0;
};

struct Calibrations {
  const quant::Calibration* attention = nullptr;  // qqt/sst
  const quant::Calibration* gram = nullptr;       // ktk/vtv
  quant::Calibration attention_store, gram_store;
  Json info;
};

const quant::Calibration* CalibrationFor(const quant::CodecSpec& spec, const Calibrations& c) {
  if (!spec.needs_calibration) return nullptr;
  return spec.k_objective == "ktk" ? c.gram : c.attention;
}

std::vector<int32_t> Slice(const std::vector<int32_t>& t, size_t from, size_t n) {
  return std::vector<int32_t>(t.begin() + from, t.begin() + from + n);
}

// Disjoint windows of `len` tokens, `count` of them, round-robin over texts, seeded.
absl::StatusOr<std::vector<std::vector<int32_t>>> PickWindows(const std::vector<Text>& texts,
                                                              int len, int count, uint64_t seed,
                                                              Json* where) {
  std::vector<std::vector<size_t>> slots(texts.size());
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(len) * 0x9E3779B97F4A7C15ull));
  for (size_t i = 0; i < texts.size(); ++i) {
    // Skip each text's first 256 tokens (titles) and keep the windows disjoint.
    const size_t n = texts[i].tokens.size();
    for (size_t s = 256; s + len <= n; s += len) slots[i].push_back(s);
    std::shuffle(slots[i].begin(), slots[i].end(), rng);
  }
  std::vector<std::vector<int32_t>> out;
  std::vector<size_t> used(texts.size(), 0);
  for (size_t round = 0; static_cast<int>(out.size()) < count; ++round) {
    bool any = false;
    for (size_t i = 0; i < texts.size() && static_cast<int>(out.size()) < count; ++i) {
      if (used[i] < slots[i].size()) {
        const size_t s = slots[i][used[i]++];
        out.push_back(Slice(texts[i].tokens, s, len));
        where->push_back({{"text", texts[i].path}, {"first_token", s}});
        any = true;
      }
    }
    if (!any) {
      return absl::InvalidArgumentError(absl::StrCat("the texts hold only ", out.size(),
                                                     " disjoint windows of ", len, " tokens"));
    }
  }
  return out;
}

}  // namespace

void ApplyQuick(EvalConfig* c) {
  c->quick = true;
  c->contexts = {1280};
  c->windows = {2};
  c->calibration_tokens = 4096;
  c->niah_contexts = {1024};
  c->niah_depths = {30, 70};
  c->niah_trials = 1;
  c->greedy_prompts = 4;
  c->greedy_prompt_tokens = 384;
  c->greedy_new_tokens = 16;
}

absl::StatusOr<TextCalibration> CalibrateFromTokens(
    model::Model& model, const std::vector<std::vector<int32_t>>& texts, int max_tokens,
    int chunk, float k_clip, float v_clip) {
  const model::ModelConfig& c = model.config();
  std::vector<quant::CovarianceAccumulator> acc;
  for (int l = 0; l < c.num_layers; ++l) {
    OSCARKV_ASSIGN_OR_RETURN(auto a, quant::CovarianceAccumulator::Create(
                                         c.num_heads, c.num_kv_heads, c.head_dim));
    acc.push_back(std::move(a));
  }
  std::vector<std::vector<float>> ks(c.num_layers), vs(c.num_layers);
  absl::Status hook_status;
  model.set_qkv_hook([&](int layer, int64_t, int64_t n, const float* q, const float* k,
                         const float* v) {
    const size_t qn = n * c.num_heads * c.head_dim, kn = n * c.num_kv_heads * c.head_dim;
    absl::Status s = acc[layer].AddPass1({q, qn}, {k, kn}, {v, kn}, static_cast<int>(n));
    if (!s.ok() && hook_status.ok()) hook_status = s;
    // Pass 2 needs every pass-1 token first: keep all chunks' K/V (30 layers x 20K tokens x
    // 192 x 2 floats is ~0.9 GB at the largest calibration we run).
    ks[layer].insert(ks[layer].end(), k, k + kn);
    vs[layer].insert(vs[layer].end(), v, v + kn);
  });
  std::vector<size_t> offset(texts.size(), 256);
  int64_t total = 0;
  Progress progress("calib", max_tokens, true);
  while (total < max_tokens) {
    bool any = false;
    for (size_t i = 0; i < texts.size() && total < max_tokens; ++i) {
      const int n = static_cast<int>(std::min<int64_t>(chunk, max_tokens - total));
      if (offset[i] + n > texts[i].size()) continue;
      any = true;
      std::vector<int32_t> toks = Slice(texts[i], offset[i], n);
      offset[i] += n;
      auto logits = model.Forward(toks);
      if (!logits.ok()) {
        model.set_qkv_hook({});
        return logits.status();
      }
      total += n;
      progress.Advance(n, absl::StrCat(total, " tokens"));
    }
    if (!any) break;
  }
  progress.Finish();
  model.set_qkv_hook({});
  OSCARKV_RETURN_IF_ERROR(hook_status);
  for (int l = 0; l < c.num_layers; ++l) {
    OSCARKV_RETURN_IF_ERROR(acc[l].AddPass2(ks[l], vs[l], static_cast<int>(total)));
    std::vector<float>().swap(ks[l]);
    std::vector<float>().swap(vs[l]);
  }
  if (total == 0) return absl::InvalidArgumentError("no calibration tokens");
  std::vector<quant::LayerCovariances> covs;
  for (auto& a : acc) {
    OSCARKV_ASSIGN_OR_RETURN(auto cv, a.Finish());
    covs.push_back(std::move(cv));
  }
  TextCalibration out;
  out.tokens = total;
  OSCARKV_ASSIGN_OR_RETURN(out.attention,
                           quant::CalibrateFromCovariances(covs, "qqt", "sst", 0, k_clip, v_clip));
  OSCARKV_ASSIGN_OR_RETURN(out.gram,
                           quant::CalibrateFromCovariances(covs, "ktk", "vtv", 0, k_clip, v_clip));
  out.attention.tokens = out.gram.tokens = static_cast<uint64_t>(total);
  return out;
}

namespace {

// ---- perplexity-style grid -------------------------------------------------------------------

// One (window, codec) result: the codec's window scored against the reference.
struct CodecWindow {
  WindowSums all, ge;
  double bits = -1, bits_allocated = -1;  // from a real cache holding window 0; -1 otherwise
  std::vector<LayerFidelity> fidelity;
};

// Bits/element of a real ThreeTierCache holding `len` tokens of every layer (the window's own
// K/V through cache_sink, or zeros for the reference), from its format and from its allocation.
void SetBits(const quant::ThreeTierCache& cache, const model::ModelConfig& mc, int len,
             CodecWindow* out) {
  out->bits = cache.BitsPerElement();
  out->bits_allocated = static_cast<double>(cache.BytesAllocated()) * 8.0 /
                        (2.0 * mc.num_layers * mc.num_kv_heads * mc.head_dim * len);
}

// The codec's teacher-forced forward over `toks` (or the reference's hidden states when the
// codec is the reference), scored position by position against the reference's logits.
absl::StatusOr<CodecWindow> EvaluateCodecWindow(const EvalConfig& cfg, const model::Model& model,
                                                const CodecSetup& setup, bool is_reference,
                                                int window, const std::vector<int32_t>& toks,
                                                const std::vector<float>& ref_hidden) {
  const model::ModelConfig& mc = model.config();
  const int len = static_cast<int>(toks.size());
  CodecWindow out;
  std::vector<float> own_hidden;
  const std::vector<float>* hidden = &ref_hidden;
  if (is_reference && !cfg.quick) {  // the reference row is M0 itself (recomputed in --quick)
    if (window == 0) {
      OSCARKV_ASSIGN_OR_RETURN(auto cc, setup.CacheConfig(mc));
      OSCARKV_ASSIGN_OR_RETURN(auto sink, quant::ThreeTierCache::Create(cc));
      std::vector<float> zeros(static_cast<size_t>(len) * mc.num_kv_heads * mc.head_dim);
      for (int l = 0; l < mc.num_layers; ++l) {
        OSCARKV_RETURN_IF_ERROR(sink->Append(l, zeros.data(), zeros.data(), len));
      }
      SetBits(*sink, mc, len, &out);
    }
  } else {
    ForwardOptions fo;
    fo.attention_fidelity = window < cfg.fidelity_windows;
    std::unique_ptr<quant::ThreeTierCache> sink;
    if (window == 0) {
      OSCARKV_ASSIGN_OR_RETURN(auto cc, setup.CacheConfig(mc));
      OSCARKV_ASSIGN_OR_RETURN(sink, quant::ThreeTierCache::Create(cc));
      fo.cache_sink = sink.get();
    }
    OSCARKV_ASSIGN_OR_RETURN(ForwardResult r, TeacherForcedForward(model, setup, toks, fo));
    own_hidden = std::move(r.hidden);
    hidden = &own_hidden;
    if (sink != nullptr) SetBits(*sink, mc, len, &out);
    out.fidelity = std::move(r.fidelity);
  }
  // Score t in [score_from, T-2] in chunks of positions (bounded logit buffers).
  const int first = cfg.score_from, last = len - 2;
  const int chunk = 128;
  const int vocab = mc.vocab_size;
  std::vector<float> ref_logits, logits;
  for (int t0 = first; t0 <= last; t0 += chunk) {
    const int rows = std::min(chunk, last - t0 + 1);
    OutputLogits(model, ref_hidden.data() + static_cast<size_t>(t0) * mc.d_model, rows,
                 &ref_logits);
    const std::vector<float>* codec_logits = &ref_logits;
    if (hidden != &ref_hidden) {
      OutputLogits(model, hidden->data() + static_cast<size_t>(t0) * mc.d_model, rows, &logits);
      codec_logits = &logits;
    }
    for (int r = 0; r < rows; ++r) {
      const int t = t0 + r;
      const size_t at = static_cast<size_t>(r) * vocab;
      PositionScore ps =
          ScorePosition(std::span<const float>(ref_logits.data() + at, vocab),
                        std::span<const float>(codec_logits->data() + at, vocab), toks[t + 1]);
      out.all.Add(ps);
      if (t >= 1024) out.ge.Add(ps);
    }
  }
  return out;
}

// Runs `tasks` on `jobs` threads. A task may start only when ready(i) (its dependencies are
// done); tasks are taken in index order among the ready ones. Stops at the first error.
absl::Status RunTasks(int jobs, int tasks, const std::function<bool(int)>& ready,
                      const std::function<absl::Status(int)>& run, std::mutex& mu,
                      std::condition_variable& changed) {
  std::vector<char> taken(tasks, 0);
  int remaining = tasks, running = 0;
  absl::Status first_error;
  auto worker = [&]() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      int pick = -1;
      if (first_error.ok()) {
        for (int i = 0; i < tasks && pick < 0; ++i) {
          if (!taken[i] && ready(i)) pick = i;
        }
      }
      if (pick < 0) {
        if (remaining == 0 || !first_error.ok()) return;
        if (running == 0) {  // nothing runs and nothing is ready: a dependency cycle (a bug)
          first_error = absl::InternalError("eval tasks: no task is ready");
          changed.notify_all();
          return;
        }
        changed.wait(lock);
        continue;
      }
      taken[pick] = 1;
      ++running;
      lock.unlock();
      absl::Status s = run(pick);  // run() takes `mu` itself to publish its result
      lock.lock();
      --running;
      --remaining;
      if (!s.ok() && first_error.ok()) first_error = s;
      changed.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < jobs; ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return first_error;
}

absl::Status RunGrid(const EvalConfig& cfg, const model::Model& model,
                     const std::vector<Text>& texts, const std::vector<CodecSetup>& setups,
                     int ref_index, Json* results, Json* windows_json,
                     std::map<std::pair<std::string, int>, CodecCell>* cells,
                     const std::function<void()>& on_window) {
  const model::ModelConfig& mc = model.config();
  double total = 0;
  auto windows_for = [&](size_t ci) {
    return cfg.windows.size() == cfg.contexts.size() ? cfg.windows[ci] : cfg.windows[0];
  };
  for (size_t ci = 0; ci < cfg.contexts.size(); ++ci) {
    total += static_cast<double>(windows_for(ci)) * (setups.size() + 1) * cfg.contexts[ci];
  }
  // Results of every (codec, context) with at least one window so far.
  auto emit = [&]() {
    *results = Json::array();
    for (size_t ci = 0; ci < cfg.contexts.size(); ++ci) {
      for (const auto& s : setups) {
        auto it = cells->find({s.label, cfg.contexts[ci]});
        if (it == cells->end() || it->second.all.dnll.empty()) continue;
        const CodecCell& cell = it->second;
        Json j;
        j["codec"] = s.label;
        j["paper_id"] = std::string(s.spec->paper_id);
        j["context"] = cfg.contexts[ci];
        j["windows"] = cell.all.dnll.size();
        j["bits_per_element"] = cell.bits;
        j["bits_per_element_allocated"] = cell.bits_allocated;
        j["k_clip_ratio"] = s.k_clip;
        j["v_clip_ratio"] = s.v_clip;
        if (s.per_token_group > 0) {
          // Emulation only: the stored format has one fp16 scale+min per row of head_dim.
          j["per_token_group"] = s.per_token_group;
          j["extra_bits_per_int2_element_not_in_bits_per_element"] =
              32.0 * (mc.head_dim / s.per_token_group - 1) / mc.head_dim;
        }
        j["all_positions"] = cell.all.ToJson();
        j["positions_ge_1024"] = cell.ge1024.dnll.empty() ? Json() : cell.ge1024.ToJson();
        Json fid = Json::array();
        for (const auto& f : cell.fidelity_sum) {
          const double n = std::max(1, cell.fidelity_n);
          fid.push_back({{"layer", f.layer},
                         {"attn_row_kl", f.attn_row_kl / n},
                         {"attn_out_rel_err", f.attn_out_rel_err / n},
                         {"k_rel_mse", f.k_rel_mse / n},
                         {"v_rel_mse", f.v_rel_mse / n}});
        }
        j["attention_fidelity"] = fid;
        results->push_back(j);
      }
    }
  };
  Progress progress("eval", total, cfg.progress);
  const int num_codecs = static_cast<int>(setups.size());
  for (size_t ci = 0; ci < cfg.contexts.size(); ++ci) {
    const int len = cfg.contexts[ci];
    if (len <= cfg.score_from + 2) {
      return absl::InvalidArgumentError(absl::StrCat("context ", len, " <= score_from + 2"));
    }
    Json where = Json::array();
    OSCARKV_ASSIGN_OR_RETURN(auto windows,
                             PickWindows(texts, len, windows_for(ci), cfg.seed, &where));
    (*windows_json)[std::to_string(len)] = where;
    // Tasks, window-major: [reference forward of w, codec 0 of w, ..., codec S-1 of w]; a codec
    // task waits for its window's reference. Windows are folded into the cells in order, so the
    // results do not depend on --jobs at one BLAS thread (which --jobs > 1 uses: OpenBLAS's AVX2
    // kernels round differently per thread count).
    const int num_windows = static_cast<int>(windows.size());
    const int per_window = num_codecs + 1;
    std::vector<std::vector<float>> ref_hidden(num_windows);
    std::vector<char> ref_done(num_windows, 0);
    std::vector<std::vector<CodecWindow>> done(num_windows, std::vector<CodecWindow>(num_codecs));
    std::vector<int> codecs_done(num_windows, 0);
    int next_fold = 0;
    std::mutex mu;
    std::condition_variable changed;
    auto fold_ready_windows = [&]() {  // with `mu` held
      while (next_fold < num_windows && codecs_done[next_fold] == num_codecs) {
        for (int s = 0; s < num_codecs; ++s) {
          CodecWindow& r = done[next_fold][s];
          CodecCell& cell = (*cells)[{setups[s].label, len}];
          cell.all.Add(r.all);
          cell.ge1024.Add(r.ge);
          if (r.bits >= 0) {
            cell.bits = r.bits;
            cell.bits_allocated = r.bits_allocated;
          }
          if (!r.fidelity.empty()) {
            if (cell.fidelity_sum.empty()) cell.fidelity_sum.resize(r.fidelity.size());
            for (size_t l = 0; l < r.fidelity.size(); ++l) {
              cell.fidelity_sum[l].layer = static_cast<int>(l);
              cell.fidelity_sum[l].attn_row_kl += r.fidelity[l].attn_row_kl;
              cell.fidelity_sum[l].attn_out_rel_err += r.fidelity[l].attn_out_rel_err;
              cell.fidelity_sum[l].k_rel_mse += r.fidelity[l].k_rel_mse;
              cell.fidelity_sum[l].v_rel_mse += r.fidelity[l].v_rel_mse;
            }
            ++cell.fidelity_n;
          }
        }
        ref_hidden[next_fold] = {};  // every codec of this window has been scored
        ++next_fold;
        emit();
        if (on_window) on_window();
      }
    };
    auto ready = [&](int i) { return i % per_window == 0 || ref_done[i / per_window] != 0; };
    auto run = [&](int i) -> absl::Status {
      const int w = i / per_window, s = i % per_window - 1;
      if (s < 0) {
        OSCARKV_ASSIGN_OR_RETURN(ForwardResult r,
                                 TeacherForcedForward(model, setups[ref_index], windows[w], {}));
        std::lock_guard<std::mutex> lock(mu);
        ref_hidden[w] = std::move(r.hidden);
        ref_done[w] = 1;
        progress.Advance(len, absl::StrFormat("ctx %d win %d ref", len, w));
        return absl::OkStatus();
      }
      OSCARKV_ASSIGN_OR_RETURN(CodecWindow r,
                               EvaluateCodecWindow(cfg, model, setups[s], s == ref_index, w,
                                                   windows[w], ref_hidden[w]));
      std::lock_guard<std::mutex> lock(mu);
      done[w][s] = std::move(r);
      ++codecs_done[w];
      progress.Advance(len, absl::StrFormat("ctx %d win %d %s", len, w,
                                            setups[s].label));
      fold_ready_windows();
      return absl::OkStatus();
    };
    OSCARKV_RETURN_IF_ERROR(RunTasks(std::max(1, cfg.jobs), num_windows * per_window, ready, run,
                                     mu, changed));
  }
  progress.Finish();
  return absl::OkStatus();
}

// ---- NIAH ------------------------------------------------------------------------------------

absl::StatusOr<std::vector<std::unique_ptr<engine::QuantKvCache>>> MakeCaches(
    const model::Model& model, const std::vector<CodecSetup>& setups) {
  std::vector<std::unique_ptr<engine::QuantKvCache>> caches;
  const float scale = 1.0f / std::sqrt(static_cast<float>(model.config().head_dim));
  for (const auto& s : setups) {
    OSCARKV_ASSIGN_OR_RETURN(auto cc, s.CacheConfig(model.config()));
    cc.sm_scale = scale;
    OSCARKV_ASSIGN_OR_RETURN(auto tc, quant::ThreeTierCache::Create(cc));
    caches.push_back(std::make_unique<engine::QuantKvCache>(std::move(tc), scale));
  }
  return caches;
}

absl::Status RunNiah(const EvalConfig& cfg, const model::Model& model,
                     const std::vector<Text>& texts, const std::vector<CodecSetup>& setups,
                     Json* out) {
  const int vocab = model.config().vocab_size;
  NiahOptions options;
  options.contexts = cfg.niah_contexts;
  options.depths = cfg.niah_depths;
  options.trials = cfg.niah_trials;
  options.seed = cfg.seed;
  std::vector<std::span<const int32_t>> spans;
  for (const Text& t : texts) spans.emplace_back(t.tokens);
  OSCARKV_ASSIGN_OR_RETURN(const NiahSet set, BuildNiahCases(model.tokenizer(), spans, options));
  double total = 0;
  for (const NiahCase& c : set.cases) total += c.context;
  Progress progress("niah", total, cfg.progress);
  for (const NiahCase& c : set.cases) {
    // Prefill once at full precision into every codec's cache.
    OSCARKV_ASSIGN_OR_RETURN(auto caches, MakeCaches(model, setups));
    std::vector<model::KvCache*> targets;
    for (auto& cache : caches) targets.push_back(cache.get());
    auto seq = model.NewSequence(std::make_unique<FanoutKvCache>(targets));
    std::vector<float> logits;
    OSCARKV_RETURN_IF_ERROR(model.Prefill(*seq, c.prompt, /*all_logits=*/false, &logits));
    // Teacher-force question + passkey through each codec's cache (true decode).
    const std::vector<int32_t> forced = NiahForcedTokens(set, c);
    std::vector<int64_t> positions(forced.size());
    std::iota(positions.begin(), positions.end(), static_cast<int64_t>(c.prompt.size()));
    for (size_t s = 0; s < setups.size(); ++s) {
      std::vector<model::KvCache*> cs(forced.size(), caches[s].get());
      OSCARKV_ASSIGN_OR_RETURN(auto hidden, CacheForward(model, cs, forced, positions));
      const int first = static_cast<int>(set.question.size()) - 1;
      std::vector<float> lg;
      OutputLogits(model, hidden.data() + static_cast<size_t>(first) * model.config().d_model,
                   static_cast<int64_t>(c.answer.size()), &lg);
      double logp = 0;
      bool exact = true;
      std::vector<double> lp;
      for (size_t i = 0; i < c.answer.size(); ++i) {
        LogSoftmax(std::span<const float>(lg.data() + i * vocab, vocab), &lp);
        logp += lp[c.answer[i]];
        exact = exact && ArgMax(lp) == c.answer[i];
      }
      out->push_back({{"codec", setups[s].label},
                      {"context", c.context},
                      {"depth_percent", c.depth_percent},
                      {"trial", c.trial},
                      {"needle_position", c.needle_position},
                      {"passkey", c.passkey},
                      {"exact_match", exact},
                      {"passkey_prob", std::exp(logp)},
                      {"passkey_mean_token_prob", std::exp(logp / c.answer.size())}});
    }
    progress.Advance(c.context, absl::StrFormat("ctx %d depth %d", c.context, c.depth_percent));
  }
  progress.Finish();
  return absl::OkStatus();
}

// ---- greedy agreement -----------------------------------------------------------------------

absl::Status RunGreedy(const EvalConfig& cfg, const model::Model& model,
                       const std::vector<Text>& texts, const std::vector<CodecSetup>& setups,
                       int ref_index, Json* out) {
  const int vocab = model.config().vocab_size, dm = model.config().d_model;
  Json where = Json::array();
  OSCARKV_ASSIGN_OR_RETURN(auto prompts, PickWindows(texts, cfg.greedy_prompt_tokens,
                                                     cfg.greedy_prompts, cfg.seed + 3, &where));
  const int np = static_cast<int>(prompts.size());
  // caches[s][p]
  std::vector<std::vector<std::unique_ptr<engine::QuantKvCache>>> caches(setups.size());
  std::vector<int32_t> first_token(np);
  Progress progress("greedy", static_cast<double>(np) + setups.size() * cfg.greedy_new_tokens,
                    cfg.progress);
  for (int p = 0; p < np; ++p) {
    OSCARKV_ASSIGN_OR_RETURN(auto cs, MakeCaches(model, setups));
    std::vector<model::KvCache*> targets;
    for (size_t s = 0; s < setups.size(); ++s) {
      targets.push_back(cs[s].get());
      caches[s].push_back(std::move(cs[s]));
    }
    auto seq = model.NewSequence(std::make_unique<FanoutKvCache>(targets));
    std::vector<float> logits;
    OSCARKV_RETURN_IF_ERROR(model.Prefill(*seq, prompts[p], false, &logits));
    first_token[p] = ArgMax(std::span<const float>(logits.data(), vocab));
    progress.Advance(1, absl::StrFormat("prefill %d/%d", p + 1, np));
  }
  std::vector<std::vector<std::vector<int32_t>>> gen(setups.size());
  for (size_t s = 0; s < setups.size(); ++s) {
    gen[s].assign(np, {});
    std::vector<int32_t> cur = first_token;
    for (int p = 0; p < np; ++p) gen[s][p].push_back(cur[p]);
    std::vector<model::KvCache*> cs(np);
    for (int p = 0; p < np; ++p) cs[p] = caches[s][p].get();
    for (int step = 1; step < cfg.greedy_new_tokens; ++step) {
      std::vector<int64_t> pos(np, static_cast<int64_t>(cfg.greedy_prompt_tokens) + step - 1);
      OSCARKV_ASSIGN_OR_RETURN(auto hidden, CacheForward(model, cs, cur, pos));
      std::vector<float> lg;
      OutputLogits(model, hidden.data(), np, &lg);
      for (int p = 0; p < np; ++p) {
        cur[p] = ArgMax(std::span<const float>(lg.data() + static_cast<size_t>(p) * vocab, vocab));
        gen[s][p].push_back(cur[p]);
      }
      progress.Advance(1, absl::StrFormat("%s step %d", setups[s].label, step));
    }
    progress.Advance(1, "");
    (void)dm;
  }
  progress.Finish();
  for (size_t s = 0; s < setups.size(); ++s) {
    std::vector<double> first_div, agree;
    int identical = 0;
    for (int p = 0; p < np; ++p) {
      const auto& a = gen[ref_index][p];
      const auto& b = gen[s][p];
      int d = 0;
      while (d < static_cast<int>(a.size()) && a[d] == b[d]) ++d;
      int same = 0;
      for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
      first_div.push_back(d);
      agree.push_back(static_cast<double>(same) / a.size());
      identical += d == static_cast<int>(a.size());
    }
    out->push_back({{"codec", setups[s].label},
                    {"paper_id", std::string(setups[s].spec->paper_id)},
                    {"prompts", np},
                    {"prompt_tokens", cfg.greedy_prompt_tokens},
                    {"new_tokens", cfg.greedy_new_tokens},
                    {"first_divergence", EstimateJson(BootstrapMean(first_div))},
                    {"token_agreement", EstimateJson(BootstrapMean(agree))},
                    {"identical_fraction", static_cast<double>(identical) / np}});
  }
  return absl::OkStatus();
}

// ---- reports ---------------------------------------------------------------------------------

std::string Ci(const Json& e, const char* fmt) {
  if (e.is_null()) return "–";
  const double m = e["mean"], lo = e["ci95"][0], hi = e["ci95"][1];
  return absl::StrCat(absl::StrFormat(fmt, m), " [", absl::StrFormat(fmt, lo), ", ",
                      absl::StrFormat(fmt, hi), "]");
}

std::string Markdown(const Json& r) {
  std::string md = "# oscarkv eval results\n\n";
  absl::StrAppend(&md, "Model: `", r["model"]["path"].get<std::string>(), "` (",
                  r["model"]["layers"].get<int>(), " layers, ", r["model"]["q_heads"].get<int>(),
                  " Q heads, ", r["model"]["kv_heads"].get<int>(), " KV heads, head_dim ",
                  r["model"]["head_dim"].get<int>(), ")\n\n");
  absl::StrAppend(&md, "Command: `", r["command"].get<std::string>(), "`\n\n");
  absl::StrAppend(&md, "Protocol: ", r["protocol"]["description"].get<std::string>(), "\n\n");
  std::map<int, std::vector<Json>> by_ctx;
  for (const auto& j : r["results"]) by_ctx[j["context"].get<int>()].push_back(j);
  for (const auto& [ctx, rows] : by_ctx) {
    absl::StrAppend(&md, "## Context ", ctx, " (", rows[0]["windows"].get<int>(),
                    " windows; mean [95% bootstrap CI])\n\n");
    absl::StrAppend(&md,
                    "| codec | id | bits/elem | ΔNLL/token | token KL (nats) | top-1 agree | ppl "
                    "(M0 ppl) | ΔNLL t≥1024 | KL t≥1024 | top-1 t≥1024 |\n"
                    "|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& j : rows) {
      const Json& a = j["all_positions"];
      const Json& g = j["positions_ge_1024"];
      absl::StrAppend(
          &md, "| ", j["codec"].get<std::string>(), " | ", j["paper_id"].get<std::string>(),
          " | ", absl::StrFormat("%.3f", j["bits_per_element"].get<double>()), " | ",
          Ci(a["delta_nll"], "%.4f"), " | ", Ci(a["token_kl"], "%.4f"), " | ",
          Ci(a["top1_agreement"], "%.3f"), " | ",
          absl::StrFormat("%.2f (%.2f)", a["perplexity"].get<double>(),
                          a["reference_perplexity"].get<double>()),
          " | ", g.is_null() ? "–" : Ci(g["delta_nll"], "%.4f"), " | ",
          g.is_null() ? "–" : Ci(g["token_kl"], "%.4f"), " | ",
          g.is_null() ? "–" : Ci(g["top1_agreement"], "%.3f"), " |\n");
    }
    absl::StrAppend(&md, "\nPer-layer attention fidelity (same inputs, first window), mean over "
                         "layers / worst layer:\n\n| codec | attn-row KL mean | attn-row KL max | "
                         "out rel err mean | out rel err max |\n|---|---|---|---|---|\n");
    for (const auto& j : rows) {
      const Json& f = j["attention_fidelity"];
      if (f.empty()) continue;
      double km = 0, kx = 0, em = 0, ex = 0;
      for (const auto& l : f) {
        km += l["attn_row_kl"].get<double>();
        kx = std::max(kx, l["attn_row_kl"].get<double>());
        em += l["attn_out_rel_err"].get<double>();
        ex = std::max(ex, l["attn_out_rel_err"].get<double>());
      }
      absl::StrAppend(&md, "| ", j["codec"].get<std::string>(), " | ",
                      absl::StrFormat("%.4g | %.4g | %.4g | %.4g", km / f.size(), kx,
                                      em / f.size(), ex),
                      " |\n");
    }
    md += "\n";
  }
  if (r.contains("niah") && !r["niah"].empty()) {
    md += "## Needle in a haystack (true decode through each codec's cache)\n\n"
          "Exact-match rate and mean passkey probability per codec and context (all depths).\n\n"
          "| codec | context | exact match | passkey prob (mean) | per depth (prob) |\n"
          "|---|---|---|---|---|\n";
    std::map<std::pair<std::string, int>, std::vector<Json>> g;
    std::vector<std::pair<std::string, int>> order;
    for (const auto& j : r["niah"]) {
      auto key = std::make_pair(j["codec"].get<std::string>(), j["context"].get<int>());
      if (!g.count(key)) order.push_back(key);
      g[key].push_back(j);
    }
    for (const auto& key : order) {
      const auto& v = g[key];
      double em = 0, pm = 0;
      std::string per;
      for (const auto& j : v) {
        em += j["exact_match"].get<bool>();
        pm += j["passkey_prob"].get<double>();
        absl::StrAppend(&per, j["depth_percent"].get<int>(), "%:",
                        absl::StrFormat("%.3f", j["passkey_prob"].get<double>()), " ");
      }
      absl::StrAppend(&md, "| ", key.first, " | ", key.second, " | ",
                      absl::StrFormat("%.2f", em / v.size()), " | ",
                      absl::StrFormat("%.4f", pm / v.size()), " | ", per, "|\n");
    }
    md += "\n";
  }
  if (r.contains("greedy") && !r["greedy"].empty()) {
    md += "## Greedy agreement vs M0 (true decode)\n\n| codec | id | prompts | new tokens | "
          "first divergence | token agreement | identical |\n|---|---|---|---|---|---|---|\n";
    for (const auto& j : r["greedy"]) {
      absl::StrAppend(&md, "| ", j["codec"].get<std::string>(), " | ",
                      j["paper_id"].get<std::string>(), " | ", j["prompts"].get<int>(), " | ",
                      j["new_tokens"].get<int>(), " | ", Ci(j["first_divergence"], "%.1f"), " | ",
                      Ci(j["token_agreement"], "%.3f"), " | ",
                      absl::StrFormat("%.2f", j["identical_fraction"].get<double>()), " |\n");
    }
  }
  return md;
}

// A codec as --codecs names it: NAME[@K/V][+gN].
struct CodecVariant {
  std::string label;  // as given
  std::string base;   // the codec table's name
  float k_clip = -1.0f, v_clip = -1.0f;
  int group = 0;
};

absl::StatusOr<CodecVariant> ParseCodecVariant(const std::string& text) {
  CodecVariant v;
  v.label = text;
  std::string rest = text;
  if (const size_t plus = rest.find("+g"); plus != std::string::npos) {
    const std::string g = rest.substr(plus + 2);
    if (g.empty() || g.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InvalidArgumentError("codec " + text + ": the group is +gN with N a number");
    }
    v.group = std::stoi(g);
    rest = rest.substr(0, plus);
  }
  if (const size_t at = rest.find('@'); at != std::string::npos) {
    const std::string clip = rest.substr(at + 1);
    const size_t slash = clip.find('/');
    char* end_k = nullptr;
    char* end_v = nullptr;
    if (slash != std::string::npos) {
      v.k_clip = std::strtof(clip.c_str(), &end_k);
      v.v_clip = std::strtof(clip.c_str() + slash + 1, &end_v);
    }
    if (slash == std::string::npos || end_k != clip.c_str() + slash || *end_v != '\0' ||
        !(v.k_clip > 0.5f && v.k_clip <= 1.0f) || !(v.v_clip > 0.5f && v.v_clip <= 1.0f)) {
      return absl::InvalidArgumentError("codec " + text +
                                        ": clip ratios are @K/V, each in (0.5, 1], e.g. @0.90/0.84");
    }
    rest = rest.substr(0, at);
  }
  v.base = rest;
  return v;
}

bool IsPerToken(const quant::CodecSpec& spec) {  // M1-M6: one INT2 row per token and head
  return spec.residual_tokens == 0 && spec.id != kvformat::CodecId::kBf16;
}

absl::Status CheckVariant(const quant::CodecSpec& spec, const CodecVariant& v, int head_dim) {
  if (v.k_clip > 0 && (spec.k_clip_ratio >= 1.0f || spec.v_clip_ratio >= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec ", v.label, ": ", std::string(spec.name), " does not clip (clipping it would ",
                     "change its definition)"));
  }
  if (v.group > 0 && IsPerToken(spec) &&
      (v.group % 32 != 0 || head_dim % v.group != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("codec ", v.label, ": group ", v.group,
                                                   " must be a multiple of 32 dividing head_dim ",
                                                   head_dim));
  }
  if (v.group > 0 && !IsPerToken(spec) && v.label != spec.name) {  // +gN on KIVI/OScaR/bf16
    return absl::InvalidArgumentError(
        absl::StrCat("codec ", v.label, ": per-token groups apply to per-token codecs only"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateEvalConfig(const EvalConfig& cfg, int context_length) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (cfg.texts.empty()) return bad("--text: no evaluation text");
  if (cfg.out_dir.empty()) return bad("--out: no output folder");
  if (cfg.contexts.empty() || cfg.windows.empty()) return bad("--context/--windows empty");
  if (cfg.windows.size() != 1 && cfg.windows.size() != cfg.contexts.size()) {
    return bad("--windows: one value or one per context");
  }
  // Scored positions index the window's tokens from score_from on.
  if (cfg.score_from < 0) return bad("--score-from must be >= 0, got ", cfg.score_from);
  for (int w : cfg.windows) {
    if (w < 0) return bad("--windows must be >= 0, got ", w);
  }
  const bool grid =
      std::any_of(cfg.windows.begin(), cfg.windows.end(), [](int w) { return w > 0; });
  if (!grid && !cfg.niah && !cfg.greedy) {
    return bad("nothing to evaluate: --windows 0 skips the teacher-forced grid; ask for "
               "--windows N with N > 0, or for --niah and/or --greedy");
  }
  const std::string model_ctx = absl::StrCat("the model's context length ", context_length);
  for (size_t ci = 0; ci < cfg.contexts.size(); ++ci) {
    const int len = cfg.contexts[ci];
    const int windows =
        cfg.windows.size() == cfg.contexts.size() ? cfg.windows[ci] : cfg.windows[0];
    if (windows == 0) continue;  // this context is not run
    if (len <= cfg.score_from + 2) {
      return bad("--context ", len, " leaves nothing to score: it must exceed --score-from ",
                 cfg.score_from, " + 2");
    }
    if (context_length > 0 && len > context_length) {
      return bad("--context ", len, " exceeds ", model_ctx);
    }
  }
  if (cfg.fidelity_windows < 0) {
    return bad("--fidelity-windows must be >= 0, got ", cfg.fidelity_windows);
  }
  if (cfg.calibration_tokens <= 0) {
    return bad("--calibration-tokens must be > 0, got ", cfg.calibration_tokens);
  }
  if (cfg.calibration_chunk <= 0) {
    return bad("calibration chunk must be > 0, got ", cfg.calibration_chunk);
  }
  // The same range as a codec's @K/V (ParseCodecVariant); kNoClipOverride keeps the codec's.
  for (auto [flag, clip] : {std::pair{"--k-clip", cfg.k_clip}, std::pair{"--v-clip", cfg.v_clip}}) {
    if (clip != kNoClipOverride && !(clip > 0.5f && clip <= 1.0f)) {
      return bad(flag, " must be in (0.5, 1], got ", clip);
    }
  }
  if (cfg.threads < 0) return bad("--threads must be >= 0, got ", cfg.threads);
  if (cfg.jobs < 1) return bad("--jobs must be >= 1, got ", cfg.jobs);
  if (cfg.group_size < 0) return bad("--group-size must be >= 0, got ", cfg.group_size);
  if (cfg.niah) {
    if (cfg.niah_contexts.empty() || cfg.niah_depths.empty()) {
      return bad("--niah needs --niah-context and --niah-depth values");
    }
    if (cfg.niah_trials < 1) return bad("--niah-trials must be >= 1, got ", cfg.niah_trials);
    for (int d : cfg.niah_depths) {
      if (d < 0 || d > 100) return bad("--niah-depth must be in [0, 100], got ", d);
    }
    for (int len : cfg.niah_contexts) {
      // The needle lies between the 64-token sink and the 256-token recent window (niah.h).
      if (len <= 64 + 256) return bad("--niah-context ", len, " is too short: it must exceed 320");
      if (context_length > 0 && len > context_length) {
        return bad("--niah-context ", len, " exceeds ", model_ctx);
      }
    }
  }
  if (cfg.greedy) {
    if (cfg.greedy_prompts < 1) {
      return bad("--greedy-prompts must be >= 1, got ", cfg.greedy_prompts);
    }
    if (cfg.greedy_prompt_tokens < 1) {
      return bad("--greedy-prompt-tokens must be >= 1, got ", cfg.greedy_prompt_tokens);
    }
    if (cfg.greedy_new_tokens < 1) {
      return bad("--greedy-new-tokens must be >= 1, got ", cfg.greedy_new_tokens);
    }
    const int64_t total = int64_t{cfg.greedy_prompt_tokens} + cfg.greedy_new_tokens;
    if (context_length > 0 && total > context_length) {
      return bad("--greedy-prompt-tokens ", cfg.greedy_prompt_tokens, " + --greedy-new-tokens ",
                 cfg.greedy_new_tokens, " exceeds ", model_ctx);
    }
  }
  return absl::OkStatus();
}

absl::Status RunEval(const EvalConfig& cfg_in) {
  EvalConfig cfg = cfg_in;
  // Bad values fail here, before the model loads, and below again against its context length.
  OSCARKV_RETURN_IF_ERROR(ValidateEvalConfig(cfg));
  if (cfg.codecs.empty()) {
    for (const auto& s : quant::AllCodecs()) cfg.codecs.emplace_back(s.name);
  }
  if (cfg.calibration_texts.empty()) {
    cfg.calibration_texts = {FindPath("data/text/austen/prideprejudice.txt"),
                             FindPath("data/text/austen/sensesensibility.txt")};
  }
  if (cfg.threads > 0) model::SetCpuThreads(cfg.threads);
  if (cfg.jobs > 1) {
    model::SetCpuThreads(1);  // parallel tasks; nested BLAS threads would oversubscribe
    if (cfg.threads > 1) LOG(WARNING) << "eval: --jobs " << cfg.jobs << " runs BLAS on 1 thread";
  }
  const auto t_start = Clock::now();
  std::error_code ec;
  fs::create_directories(cfg.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", cfg.out_dir));

  OSCARKV_ASSIGN_OR_RETURN(std::string model_path, model::ResolveModelPath(cfg.model));
  OSCARKV_ASSIGN_OR_RETURN(auto model, model::Model::Load(model_path));
  const model::ModelConfig& mc = model->config();
  LOG(INFO) << "eval: model " << model_path << " (" << mc.num_layers << " layers, head_dim "
            << mc.head_dim << ")";
  OSCARKV_RETURN_IF_ERROR(ValidateEvalConfig(cfg, mc.context_length));
  // Calibration chunks are ours, not the user's: keep them within the model's context.
  if (mc.context_length > 0) {
    cfg.calibration_chunk = std::min(cfg.calibration_chunk, mc.context_length);
  }

  std::vector<Text> texts;
  for (const auto& p : cfg.texts) {
    OSCARKV_ASSIGN_OR_RETURN(Text t, LoadText(*model, p));
    LOG(INFO) << "eval: " << p << ": " << t.tokens.size() << " tokens";
    texts.push_back(std::move(t));
  }

  // Codecs and calibration.
  std::vector<const quant::CodecSpec*> specs;
  std::vector<CodecVariant> variants;
  bool need_att = false, need_gram = false;
  for (const auto& n : cfg.codecs) {
    OSCARKV_ASSIGN_OR_RETURN(CodecVariant v, ParseCodecVariant(n));
    if (v.group == 0) v.group = cfg.group_size;
    OSCARKV_ASSIGN_OR_RETURN(const quant::CodecSpec* s, quant::FindCodec(v.base));
    OSCARKV_RETURN_IF_ERROR(CheckVariant(*s, v, mc.head_dim));
    if (v.group > 0 && (cfg.niah || cfg.greedy)) {
      return absl::InvalidArgumentError(
          absl::StrCat(n, ": per-token groups are an emulation-only lever; --niah/--greedy decode "
                       "through the real cache, whose format has one group per row"));
    }
    for (const auto& other : variants) {
      if (other.label == v.label) return absl::InvalidArgumentError("--codecs: " + n + " twice");
    }
    specs.push_back(s);
    variants.push_back(v);
    if (s->needs_calibration) (s->k_objective == "ktk" ? need_gram : need_att) = true;
  }
  Calibrations cal;
  cal.info = Json::object();
  std::vector<std::string> calib_text_paths;
  Json files = Json::array();
  for (const std::string& file : cfg.calibration_files) {
    OSCARKV_ASSIGN_OR_RETURN(quant::Calibration c, quant::ReadCalibrationFile(file));
    const bool gram = c.k_objective == "ktk";
    if ((gram ? cal.gram : cal.attention) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--calibration: two files with objectives ", c.k_objective, "/", c.v_objective));
    }
    (gram ? cal.gram_store : cal.attention_store) = std::move(c);
    (gram ? cal.gram : cal.attention) = gram ? &cal.gram_store : &cal.attention_store;
    files.push_back(file);
    auto side = ReadFile(file + ".texts.json");
    if (side.ok()) {
      Json sj = Json::parse(*side, nullptr, false);
      if (!sj.is_discarded() && sj.contains("texts")) {
        for (const auto& t : sj["texts"]) {
          calib_text_paths.push_back(FindPath(t["path"].get<std::string>()));
        }
      }
    } else {
      LOG(WARNING) << "\n*** WARNING: calibration file " << file
                   << " has no .texts.json sidecar: cannot verify that the evaluation text is "
                      "disjoint from the calibration text. ***";
    }
  }
  if (!files.empty()) cal.info["files"] = files;
  const bool build_here = (need_att && cal.attention == nullptr) || (need_gram && cal.gram == nullptr);
  std::vector<Text> calib_texts;
  if (build_here) {
    for (const auto& p : cfg.calibration_texts) {
      OSCARKV_ASSIGN_OR_RETURN(Text t, LoadText(*model, p));
      calib_texts.push_back(std::move(t));
      calib_text_paths.push_back(p);
    }
  }
  // Overlap check before any expensive work.
  Json overlap = Json::array();
  {
    std::vector<uint64_t> set;
    std::vector<uint64_t> calib_hashes;
    for (const auto& p : calib_text_paths) {
      auto it = std::find_if(calib_texts.begin(), calib_texts.end(),
                             [&](const Text& t) { return t.path == p; });
      Text t;
      if (it != calib_texts.end()) {
        t = *it;
      } else {
        auto lt = LoadText(*model, p);
        if (!lt.ok()) {
          LOG(WARNING) << "*** WARNING: calibration text " << p << " unreadable; overlap not checked against it";
          continue;
        }
        t = std::move(*lt);
      }
      calib_hashes.push_back(t.hash);
      auto s = ShingleSet(t.tokens);
      set.insert(set.end(), s.begin(), s.end());
    }
    std::sort(set.begin(), set.end());
    for (const auto& t : texts) {
      const bool same_file =
          std::find(calib_hashes.begin(), calib_hashes.end(), t.hash) != calib_hashes.end();
      const double frac = same_file ? 1.0 : OverlapFraction(t.tokens, set);
      overlap.push_back({{"text", t.path}, {"identical_to_calibration_file", same_file},
                         {"shingle_overlap_fraction", frac}, {"shingle_tokens", kShingleTokens}});
      if (same_file || frac > 0.01) {
        const std::string msg = absl::StrFormat(
            "evaluation text %s overlaps the calibration text (%.2f%% of its %d-token shingles)",
            t.path, 100 * frac, kShingleTokens);
        if (!cfg.allow_overlap) return absl::FailedPreconditionError(msg);
        LOG(WARNING) << "\n*** WARNING: " << msg << " — results are NOT held-out ***";
      }
    }
    if (calib_text_paths.empty() && (need_att || need_gram)) {
      LOG(WARNING) << "*** WARNING: no calibration text known; disjointness not verified ***";
    }
  }
  if (build_here) {
    std::vector<std::vector<int32_t>> toks;
    for (const auto& t : calib_texts) toks.push_back(t.tokens);
    const float kc = cfg.k_clip > 0 ? cfg.k_clip : 0.96f;
    const float vc = cfg.v_clip > 0 ? cfg.v_clip : 0.92f;
    OSCARKV_ASSIGN_OR_RETURN(TextCalibration tc,
                             CalibrateFromTokens(*model, toks, cfg.calibration_tokens,
                                                 cfg.calibration_chunk, kc, vc));
    Json side;
    side["texts"] = Json::array();
    for (const auto& t : calib_texts) side["texts"].push_back({{"path", t.path}, {"xxh3", t.hash}});
    side["tokens"] = tc.tokens;
    for (auto [c, name] : {std::pair{&tc.attention, "calibration_qqt_sst.okvcal"},
                           std::pair{&tc.gram, "calibration_ktk_vtv.okvcal"}}) {
      const std::string path = cfg.out_dir + "/" + name;
      OSCARKV_RETURN_IF_ERROR(quant::WriteCalibrationFile(path, *c));
      std::ofstream(path + ".texts.json") << side.dump(2);
    }
    if (cal.attention == nullptr) {
      cal.attention_store = std::move(tc.attention);
      cal.attention = &cal.attention_store;
    }
    if (cal.gram == nullptr) {
      cal.gram_store = std::move(tc.gram);
      cal.gram = &cal.gram_store;
    }
    cal.info["built_from_texts"] = calib_text_paths;
    cal.info["tokens"] = tc.tokens;
    cal.info["chunk_tokens"] = cfg.calibration_chunk;
    cal.info["written_to"] = cfg.out_dir;
  }

  std::vector<CodecSetup> setups;
  int ref_index = -1;
  for (size_t i = 0; i < specs.size(); ++i) {
    const CodecVariant& v = variants[i];
    OSCARKV_ASSIGN_OR_RETURN(
        CodecSetup s, PrepareCodec(*model, specs[i]->name, CalibrationFor(*specs[i], cal),
                                   v.k_clip > 0 ? v.k_clip : cfg.k_clip,
                                   v.v_clip > 0 ? v.v_clip : cfg.v_clip));
    s.label = v.label;
    if (specs[i]->id == kvformat::CodecId::kBf16 && v.label == specs[i]->name) {
      ref_index = static_cast<int>(i);
    }
    if (IsPerToken(*specs[i])) s.per_token_group = v.group;
    setups.push_back(std::move(s));
  }
  if (ref_index < 0) {  // the reference is always run
    OSCARKV_ASSIGN_OR_RETURN(CodecSetup s, PrepareCodec(*model, "bf16", nullptr));
    setups.insert(setups.begin(), std::move(s));
    ref_index = 0;
  }

  Json r;
  r["command"] = cfg.command_line;
  r["model"] = {{"path", model_path}, {"arch", mc.arch_name}, {"layers", mc.num_layers},
                {"q_heads", mc.num_heads}, {"kv_heads", mc.num_kv_heads},
                {"head_dim", mc.head_dim}, {"vocab", mc.vocab_size}};
  r["protocol"] = {
      {"description",
       absl::StrCat("decode-equivalent teacher forcing (every query attends to the cache state of "
                    "its decode step: sink 64 / recent 256..263 BF16, the rest dequantised; "
                    "KIVI/OScaR residual flush tiles), windows from position 0, scored positions "
                    "t in [", cfg.score_from, ", T-2] predicting t+1 and the subset t >= 1024; "
                    "metrics per window then mean over windows with 95% percentile bootstrap "
                    "(2000 resamples, fixed seed); reference = bf16 (M0) through the same path")},
      {"score_from", cfg.score_from},
      {"contexts", cfg.contexts},
      {"windows", cfg.windows},
      {"seed", cfg.seed},
      {"per_token_group", cfg.group_size},
      {"quick", cfg.quick},
      {"texts", cfg.texts}};
  r["calibration"] = cal.info;
  r["overlap_check"] = overlap;
  Json results = Json::array(), windows_json = Json::object();
  std::map<std::pair<std::string, int>, CodecCell> cells;
  // --windows 0 skips the grid (NIAH / greedy only).
  if (std::any_of(cfg.windows.begin(), cfg.windows.end(), [](int w) { return w > 0; })) {
    OSCARKV_RETURN_IF_ERROR(RunGrid(cfg, *model, texts, setups, ref_index, &results,
                                    &windows_json, &cells, [&] {
                                      r["results"] = results;
                                      r["windows"] = windows_json;
                                      std::ofstream(cfg.out_dir + "/results.json")
                                          << r.dump(2) << "\n";
                                      std::ofstream(cfg.out_dir + "/RESULTS.md") << Markdown(r);
                                    }));
  }
  r["results"] = results;
  r["windows"] = windows_json;
  auto write = [&]() -> absl::Status {
    std::ofstream(cfg.out_dir + "/results.json") << r.dump(2) << "\n";
    std::ofstream(cfg.out_dir + "/RESULTS.md") << Markdown(r);
    return absl::OkStatus();
  };
  OSCARKV_RETURN_IF_ERROR(write());
  if (cfg.niah) {
    Json niah = Json::array();
    OSCARKV_RETURN_IF_ERROR(RunNiah(cfg, *model, texts, setups, &niah));
    r["niah"] = niah;
    r["niah_protocol"] =
        "passkey sentence at depth d of real text (start in [64, T-256-|needle|]); prompt "
        "prefilled at full precision into each codec's ThreeTierCache (serving semantics), then "
        "the question and the passkey are teacher-forced as decode steps through that cache; "
        "exact_match = greedy decoding would emit the passkey (argmax at every passkey token); "
        "passkey_prob = product of the passkey tokens' probabilities";
    OSCARKV_RETURN_IF_ERROR(write());
  }
  if (cfg.greedy) {
    Json greedy = Json::array();
    OSCARKV_RETURN_IF_ERROR(RunGreedy(cfg, *model, texts, setups, ref_index, &greedy));
    r["greedy"] = greedy;
    r["greedy_protocol"] =
        "prompts = disjoint text windows; prompt prefilled at full precision into each codec's "
        "ThreeTierCache, first token from the prefill logits, then greedy decode steps through "
        "the cache (no EOS stop); compared position by position with M0's tokens";
    OSCARKV_RETURN_IF_ERROR(write());
  }
  r["elapsed_seconds"] = std::chrono::duration<double>(Clock::now() - t_start).count();
  OSCARKV_RETURN_IF_ERROR(write());
  if (cfg.plots) {
    const std::string script = cfg.plot_script.empty()
                                   ? FindPath("scripts/plots/quality_plots.py")
                                   : cfg.plot_script;
    // The Debian python3 (with python3-matplotlib) may differ from the first python3 on PATH.
    int rc = -1;
    std::string cmd;
    for (const char* py : {"python3", "/usr/bin/python3"}) {
      cmd = absl::StrCat(py, " '", script, "' '", cfg.out_dir, "/results.json' '", cfg.out_dir,
                         "' 2>/dev/null");
      rc = std::system(cmd.c_str());
      if (rc == 0) break;
    }
    if (rc != 0) {
      LOG(WARNING) << "*** WARNING: plots skipped (" << cmd << " exited " << rc
                   << "; is python3-matplotlib installed?) ***";
    }
  }
  LOG(INFO) << "eval: wrote " << cfg.out_dir << "/results.json and RESULTS.md";
  return absl::OkStatus();
}

}  // namespace oscarkv::eval
