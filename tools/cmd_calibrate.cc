// `oscarkv calibrate`: runs the model over calibration text and writes the calibration file
// (R_K, R_V per layer) that the rotated codecs need, with a progress bar on stderr.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
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

// --out (and OUT.texts.json beside it) can be written: checked before the forward pass, which
// is the long part.
absl::Status CheckOutPath(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    return absl::InvalidArgumentError("--out " + out + " is a directory, not a file");
  }
  fs::path dir = fs::path(out).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, ec)) {
    return absl::NotFoundError("--out " + out + ": directory " + dir.string() +
                               " does not exist");
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError("--out " + out + ": " + dir.string() +
                                      " is not a directory");
  }
  // Open it for writing (without truncating an old file), as root too, where access() says yes
  // to everything; a file made here is removed again.
  const bool existed = fs::exists(out, ec);
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "--out " + out + ": cannot write it: " + std::strerror(err);
    return err == EACCES || err == EPERM || err == EROFS ? absl::PermissionDeniedError(msg)
                                                         : absl::FailedPreconditionError(msg);
  }
  ::close(fd);
  if (!existed) ::unlink(out.c_str());
  return absl::OkStatus();
}

absl::Status RunCalibrate(const CalibrateFlags& f) {
  if (f.objective != "oscar" && f.objective != "oscar-gram") {
    return absl::InvalidArgumentError("--objective must be oscar or oscar-gram");
  }
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
  // Bad flags fail before the model loads (the window against its context length in
  // CalibrateModel, before the forward pass).
  OSCARKV_RETURN_IF_ERROR(engine::ValidateCalibrateOptions(options));
  OSCARKV_RETURN_IF_ERROR(CheckOutPath(f.out));
  if (!f.dump_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(f.dump_dir, error);
    if (error) {
      const std::string msg = "--dump-dir: cannot create " + f.dump_dir + ": " + error.message();
      return error == std::errc::permission_denied ? absl::PermissionDeniedError(msg)
                                                   : absl::FailedPreconditionError(msg);
    }
  }
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(f.model));
  // One thread: the same text gives a byte-identical file on this machine.
  OSCARKV_ASSIGN_OR_RETURN(auto m, model::Model::Load(path, {.threads = 1}));
  OSCARKV_RETURN_IF_ERROR(RequireTokenizer(*m, "calibrate"));
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
