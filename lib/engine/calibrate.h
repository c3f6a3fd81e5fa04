// Calibration of a model for the rotated codecs (quant.md A.2-A.3, E.3 step 1-2): run the model
// over real text, collect every layer's post-RoPE Q/K/V, accumulate the covariances in float64
// and build R_K / R_V per layer. Deterministic for a given machine: the forward runs on one
// thread and windows are taken in file order.
#ifndef OSCARKV_LIB_ENGINE_CALIBRATE_H_
#define OSCARKV_LIB_ENGINE_CALIBRATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/model/model.h"
#include "lib/quant/calibration.h"

namespace oscarkv::engine {

struct CalibrateOptions {
  std::vector<std::string> text_files;  // UTF-8 text, read in order; required
  int64_t max_tokens = 8192;            // calibration tokens; Default: 8192
  int window_tokens = 2048;             // tokens per forward window; Default: 2048
  std::string k_objective = "qqt";      // "qqt" (oscar) or "ktk" (oscar-gram); Default: qqt
  std::string v_objective = "sst";      // "sst" (oscar) or "vtv" (oscar-gram); Default: sst
  float k_clip_ratio = 0.96f;           // Default: 0.96 (quant.md A.4)
  float v_clip_ratio = 0.92f;           // Default: 0.92
  // When set, the first `dump_tokens` tokens' post-RoPE Q/K/V of every layer are written there
  // as .npy files (lib/quant/activation_dump.h), e.g. for `oscarkv codecs report`.
  std::string dump_dir;                 // Default: none
  int dump_tokens = 512;                // Default: 512 (about 60 MB for the default model)
  // Called after each window with tokens done and the total (progress display).
  std::function<void(int64_t done, int64_t total)> progress;
};

// The checks of `options` that need no text: a text file, positive counts, max_tokens at least
// one window, known objectives (qqt|ktk, sst|vtv), clip ratios in (0, 1] (the file format's
// range), dump_tokens >= 1 and, with context_length > 0 (the model's), a window that fits it.
// Messages name the `oscarkv calibrate` flags. CalibrateModel runs it first.
// @return kInvalidArgument naming the bad value.
absl::Status ValidateCalibrateOptions(const CalibrateOptions& options, int context_length = 0);

// Runs the calibration. `model_fingerprint` goes into the file (ModelFingerprint()).
// @return kInvalidArgument for bad options (ValidateCalibrateOptions with the model's context
//   length) or too little text (< one window); file errors; errors of the model and of
//   quant::CalibrateFromCovariances.
absl::StatusOr<quant::Calibration> CalibrateModel(const model::Model& model,
                                                  const CalibrateOptions& options,
                                                  uint64_t model_fingerprint);

// XXH3-64 identity of a loaded model (shape, architecture, embedding and output norm): what
// block headers and calibration files carry as the model fingerprint.
uint64_t ModelFingerprint(const model::Model& model);

}  // namespace oscarkv::engine

#endif  // OSCARKV_LIB_ENGINE_CALIBRATE_H_
