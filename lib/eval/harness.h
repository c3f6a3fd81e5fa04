// `oscarkv eval`: the quality evaluation of quant.md E on a real model and real text.
//
// Protocol (E.0): windows of T tokens from the evaluation texts, each run from position 0 with
// decode-equivalent teacher forcing (teacher_forcing.h) once for the bf16 reference (M0) and once
// per codec; scored positions t in [score_from, T - 2] predict token t + 1 (and the subset
// t >= 1024). Per window: mean ΔNLL, mean KL(p_M0 || p_codec), top-1 agreement; reported as
// means over windows with 95% percentile-bootstrap intervals (fixed seed). Bits/element come
// from a real ThreeTierCache holding the first window. Calibrated codecs use a calibration file
// or one built here from calibration texts through the model's Q/K/V hook; evaluation text that
// overlaps the calibration text is refused.
//
// NIAH and greedy agreement run the TRUE decode path: the prompt is prefilled at full precision
// (serving semantics, quant.md E.0 rule 1) into each codec's ThreeTierCache, then every further
// token (NIAH: the question and the passkey, teacher-forced; greedy: 128 generated tokens) is a
// decode step attending through that cache. The NIAH prompts come from lib/eval/niah.h, which
// gpu_e2e_bench --mode niah shares.
#ifndef OSCARKV_LIB_EVAL_HARNESS_H_
#define OSCARKV_LIB_EVAL_HARNESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/eval/niah.h"
#include "lib/model/model.h"
#include "lib/quant/calibration.h"

namespace oscarkv::eval {

// EvalConfig::k_clip / v_clip when the codecs keep their own clip ratios.
inline constexpr float kNoClipOverride = -1.0f;

struct EvalConfig {
  std::string model = "default";                 // path or "default"
  std::vector<std::string> texts;                // evaluation text files (required)
  // Codecs, each NAME[@K/V][+gN]: a codec of the table, optionally with its clip ratios
  // overridden (clipping codecs only) and/or quantised in per-token groups of N channels
  // (per-token codecs only; emulation, see group_size), e.g. "oscar@0.90/0.84+g32".
  // Default (empty): all nine codecs.
  std::vector<std::string> codecs;
  std::vector<int> contexts = {2048, 4096, 8192};
  // Windows per context: one value for all, or one per context. Default: 20.
  std::vector<int> windows = {20};
  std::string out_dir;                           // required
  // Calibration files for calibrated codecs, at most one per objective pair (qqt/sst for oscar,
  // ktk/vtv for oscar-gram); an objective no file gives is calibrated here from
  // calibration_texts. Default: empty = calibrate here.
  std::vector<std::string> calibration_files;
  std::vector<std::string> calibration_texts;    // Default: Austen P&P + S&S under data/text
  int calibration_tokens = 20480;                // Default: 20480 (quant.md A.2: 10-30K)
  int calibration_chunk = 2048;                  // Default: 2048 tokens per prefill chunk
  // Clip ratio override of clipping codecs, in (0.5, 1]; kNoClipOverride = keep the codec's.
  float k_clip = kNoClipOverride;
  float v_clip = kNoClipOverride;
  int score_from = 384;                          // >= 0; Default: 384 (> 64 + 256 + margin, E.0-3)
  int fidelity_windows = 1;                      // windows per (codec, context) with per-layer
                                                 // attention fidelity; Default: 1
  bool allow_overlap = false;                    // warn instead of refusing overlap
  bool niah = false;
  std::vector<int> niah_contexts = {2048, 4096, 8192};
  std::vector<int> niah_depths = {10, 30, 50, 70, 90};  // percent
  int niah_trials = 1;                           // haystacks per (context, depth)
  bool greedy = false;
  int greedy_prompts = 50;
  int greedy_prompt_tokens = 512;
  int greedy_new_tokens = 128;
  bool quick = false;                            // small settings, < 10 min on 2 cores
  bool plots = true;                             // run scripts/plots/quality_plots.py at the end
  std::string plot_script;                       // Default: found next to the repo root
  uint64_t seed = kDefaultEvalSeed;              // Default: kDefaultEvalSeed (lib/eval/niah.h)
  int threads = 0;                               // Default: 0 (OpenBLAS default)
  // (window, codec) forwards evaluated in parallel, each single-threaded (OpenBLAS is set to one
  // thread when > 1); results do not depend on it. Default: 1.
  int jobs = 1;
  // > 0: per-token codecs (M1-M6) quantise in groups of this many channels instead of one group
  // per row: an emulation-only lever (the block format has one scale/min per row), so it is
  // refused with --niah/--greedy, which decode through the real cache. Default: 0 (off).
  int group_size = 0;
  bool progress = true;                          // progress bar with ETA on stderr
  std::string command_line;                      // recorded in results.json
};

// Applies --quick: contexts {1280}, 2 windows, 4096 calibration tokens, NIAH 1024 x {30, 70},
// greedy 4 prompts x 16 tokens. Fields the user set explicitly are the caller's business.
void ApplyQuick(EvalConfig* config);

// The checks RunEval makes before any forward pass: counts, lengths and clip ratios in range, and
// something to run (grid windows, --niah or --greedy). With context_length > 0 (the model's),
// also that every window, NIAH case and greedy prompt + new tokens fits in it.
// @return kInvalidArgument naming the flag at fault.
absl::Status ValidateEvalConfig(const EvalConfig& config, int context_length = 0);

// Runs everything and writes out_dir/results.json, out_dir/RESULTS.md and (when matplotlib is
// present) PNG plots. kInvalidArgument for a bad config; kFailedPrecondition when evaluation
// text overlaps the calibration text (unless allow_overlap).
absl::Status RunEval(const EvalConfig& config);

// Calibration of `model` from the tokens of several texts: chunks of `chunk` tokens taken in
// turn from each text (skipping each text's first 256 tokens) until `max_tokens`, run through
// Model::Forward with the Q/K/V hook, covariances accumulated in both passes; objectives
// (k, v) as given ("qqt"/"sst" or "ktk"/"vtv"). Returns one calibration per objective pair.
struct TextCalibration {
  quant::Calibration attention;  // qqt / sst (oscar, M6)
  quant::Calibration gram;       // ktk / vtv (oscar-gram, M5)
  int64_t tokens = 0;
};
absl::StatusOr<TextCalibration> CalibrateFromTokens(
    model::Model& model, const std::vector<std::vector<int32_t>>& texts, int max_tokens,
    int chunk, float k_clip, float v_clip);

}  // namespace oscarkv::eval

#endif  // OSCARKV_LIB_EVAL_HARNESS_H_
