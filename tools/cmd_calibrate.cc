// `oscarkv calibrate`: runs the model over calibration text and writes the calibration file
// (R_K, R_V per layer) that the rotated codecs need, with a progress bar on stderr.
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/engine/calibrate.h"
#include "lib/model/forward_cpu.h"
#include "lib/model/model.h"
#include "lib/quant/calibration.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace oscarkv::tools {
namespace {

struct CalibrateFlags {
  std::string model = "default";         // Default: default
  std::vector<std::string> text;         // required
  std::string out;                       // required
  int64_t tokens = 8192;                 // Default: 8192
  int window = 2048;                     // Default: 2048
  std::string objective = "oscar";       // oscar (qqt/sst) or oscar-gram (ktk/vtv)
  float k_clip = 0.96f;                  // Default: 0.96
  float v_clip = 0.92f;                  // Default: 0.92
  std::string dump_dir;                  // Default: none
  int dump_tokens = 512;                 // Default: 512
};

absl::Status RunCalibrate(const CalibrateFlags& f) {
  if (f.objective != "oscar" && f.objective != "oscar-gram") {
    return absl::InvalidArgumentError("--objective must be oscar or oscar-gram");
  }
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(f.model));
  // One thread: the same text gives a byte-identical file on this machine.
  OSCARKV_ASSIGN_OR_RETURN(auto m, model::Model::Load(path, {.threads = 1}));
  OSCARKV_RETURN_IF_ERROR(RequireTokenizer(*m, "calibrate"));
  engine::CalibrateOptions options;
  options.text_files = f.text;
  options.max_tokens = f.tokens;
  options.window_tokens = f.window;
  options.k_objective = f.objective == "oscar" ? "qqt" : "ktk";
  options.v_objective = f.objective == "oscar" ? "sst" : "vtv";
  options.k_clip_ratio = f.k_clip;
  options.v_clip_ratio = f.v_clip;
  options.dump_dir = f.dump_dir;
  options.dump_tokens = f.dump_tokens;
  if (!f.dump_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(f.dump_dir, error);
    if (error) return absl::PermissionDeniedError("cannot create " + f.dump_dir);
  }
  const auto start = std::chrono::steady_clock::now();
  options.progress = [&](int64_t done, int64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = done > 0 ? s * (total - done) / done : 0;
    const int bar = static_cast<int>(30 * done / total);
    std::fprintf(stderr, "\rcalibrate [%s%s] %lld/%lld tokens, %.0f s, ETA %.0f s",
                 std::string(bar, '#').c_str(), std::string(30 - bar, '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), s, eta);
    if (done == total) std::fprintf(stderr, "\n");
  };
  OSCARKV_ASSIGN_OR_RETURN(quant::Calibration calibration,
                           engine::CalibrateModel(*m, options, engine::ModelFingerprint(*m)));
  OSCARKV_RETURN_IF_ERROR(quant::WriteCalibrationFile(f.out, calibration));
  // The texts it came from, beside it: `oscarkv eval` refuses evaluation text that overlaps them.
  nlohmann::ordered_json side;
  side["texts"] = nlohmann::ordered_json::array();
  for (const auto& t : f.text) side["texts"].push_back({{"path", t}});
  side["tokens"] = calibration.tokens;
  // Which OpenBLAS kernels made the bytes (another family rounds differently).
  const std::string blas_core = model::CpuBlasCoreName();
  side["blas_core"] = blas_core;
  std::ofstream(f.out + ".texts.json") << side.dump(2) << "\n";
  OSCARKV_ASSIGN_OR_RETURN(std::string bytes, quant::SerializeCalibration(calibration));
  std::cerr << absl::StrFormat(
      "wrote %s: %d layers, head_dim %d, %d tokens, fingerprint %016x, OpenBLAS kernels %s\n",
      f.out, calibration.layers.size(), calibration.head_dim, calibration.tokens,
      quant::CalibrationFingerprint(bytes), blas_core);
  return absl::OkStatus();
}

void RegisterCalibrateCommand(CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Compute OSCAR rotations (R_K, R_V per layer) from real text");
  cmd->add_option("--model", flags->model, "GGUF path, or 'default'")->default_val("default");
  cmd->add_option("--text", flags->text, "Calibration text files (disjoint from eval text)")
      ->required();
  cmd->add_option("--out", flags->out, "Output calibration file")->required();
  cmd->add_option("--tokens", flags->tokens, "Calibration tokens")->default_val(8192);
  cmd->add_option("--window", flags->window, "Tokens per forward window")->default_val(2048);
  cmd->add_option("--objective", flags->objective,
                  "oscar (C_Q / attention-weighted V) or oscar-gram (K^T K / V^T V)")
      ->default_val("oscar");
  cmd->add_option("--k-clip", flags->k_clip, "K clip ratio")->default_val(0.96f);
  cmd->add_option("--v-clip", flags->v_clip, "V clip ratio")->default_val(0.92f);
  cmd->add_option("--dump-dir", flags->dump_dir,
                  "Also write the first window's post-RoPE Q/K/V per layer as .npy files here "
                  "(input for `oscarkv codecs report --tensor DIR/layer_L_k.npy`)");
  cmd->add_option("--dump-tokens", flags->dump_tokens, "Tokens to dump")->default_val(512);
  cmd->footer(
      "The same text gives the same bytes on one machine. Across CPUs the bytes also follow "
      "OpenBLAS's kernels (printed at the end and kept in OUT.texts.json): run with "
      "OPENBLAS_CORETYPE=Haswell on x86-64, as scripts/setup.sh does, so that other CPUs can "
      "give the same bytes. Workers that share blocks load one file: its hash is part of every block key.");
  cmd->callback([flags, &result] { result.status = RunCalibrate(*flags); });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterCalibrateCommand);
}  // namespace oscarkv::tools
