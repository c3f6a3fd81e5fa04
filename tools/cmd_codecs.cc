// `oscarkv codecs list`: every KV codec (quant.md E.1) with its properties and the bits per
// element of the bytes a block actually allocates.
// `oscarkv codecs report [--tensor FILE] [--calibration CAL] [--kind k|v]`: reconstruction error
// of every codec on a K or V tensor (.npy [T, H, D] f32, the activation dump format of
// lib/quant/activation_dump.h); without --tensor, on a synthetic heavy-tailed tensor with a
// planted covariance, calibrating M5/M6 on separate synthetic tokens.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/quant/activation_dump.h"
#include "lib/quant/calibration.h"
#include "lib/quant/codec.h"
#include "lib/quant/codec_report.h"
#include "lib/quant/codec_spec.h"
#include "lib/quant/hadamard.h"
#include "lib/quant/synthetic_activations.h"
#include "tools/commands.h"

namespace oscarkv::tools {
namespace {

using quant::CodecSpec;

const char* KindName(kvformat::SegmentKind kind) {
  switch (kind) {
    case kvformat::SegmentKind::kBf16Rows:
      return "bf16-rows";
    case kvformat::SegmentKind::kInt2PerToken:
      return "per-token";
    case kvformat::SegmentKind::kInt2TokenGroup:
      return "token-g32";
    case kvformat::SegmentKind::kInt2ChannelGroup:
      return "channel-g32";
  }
  return "?";
}

std::string Windows(const CodecSpec& s) {
  if (s.residual_tokens > 0) return absl::StrFormat("residual %d", s.residual_tokens);
  if (s.sink_tokens > 0 || s.recent_tokens > 0) {
    return absl::StrFormat("sink %d/recent %d", s.sink_tokens, s.recent_tokens);
  }
  return "none";
}

absl::Status ListCodecs() {
  constexpr int kHeads = 8;
  constexpr int kTokens = kvformat::kDefaultBlockTokens;
  std::cout << absl::StrFormat("%-15s %-3s %-19s %-9s %-17s %-11s %-11s %8s %8s\n", "codec", "id",
                               "rotation", "clip K/V", "windows", "K segment", "V segment",
                               "bpe d64", "bpe d128");
  for (const CodecSpec& s : quant::AllCodecs()) {
    const std::string clip =
        s.k_clip_ratio < 1.0f ? absl::StrFormat("%.2f/%.2f", s.k_clip_ratio, s.v_clip_ratio)
                              : "none";
    std::cout << absl::StrFormat(
        "%-15s %-3s %-19s %-9s %-17s %-11s %-11s %8.4f %8.4f\n", std::string(s.name),
        std::string(s.paper_id), std::string(quant::RotationKindName(s.rotation)), clip,
        Windows(s), KindName(s.k_segment), KindName(s.v_segment),
        quant::BlockBitsPerElement(s, kHeads, 64, kTokens),
        quant::BlockBitsPerElement(s, kHeads, 128, kTokens));
  }
  std::cout << absl::StrFormat(
      "bpe: bits per K/V element of a quantized block's payload (kvformat::PayloadBytes, %d "
      "tokens, %d KV heads, token norms included); BF16 sink/recent windows not counted.\n",
      kTokens, kHeads);
  return absl::OkStatus();
}

struct ReportOptions {
  std::string tensor;
  std::string calibration;
  std::string kind = "k";
  int layer = 0;
  int head_dim = 128;  // synthetic only
  int tokens = 1024;   // synthetic only
};

// Synthetic sizes: the report measures whole 32-token groups and allocates tokens x 8 heads x
// head_dim floats, several copies.
constexpr int kMinSyntheticTokens = 32;
constexpr int kMaxSyntheticHeadDim = 512;
constexpr int kMaxSyntheticTokens = 1 << 16;

absl::Status Report(const ReportOptions& opt) {
  if (opt.kind != "k" && opt.kind != "v") {
    return absl::InvalidArgumentError("--kind must be k or v");
  }
  // Bad sizes would otherwise reach std::vector (std::length_error) or a per-codec error.
  if (opt.tensor.empty()) {
    if (!quant::IsPowerOfTwo(opt.head_dim) || opt.head_dim < 32 ||
        opt.head_dim > kMaxSyntheticHeadDim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--head-dim must be a power of two in [32, %d], got %d", kMaxSyntheticHeadDim,
          opt.head_dim));
    }
    if (opt.tokens < kMinSyntheticTokens || opt.tokens > kMaxSyntheticTokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--tokens must be in [%d, %d], got %d", kMinSyntheticTokens,
                          kMaxSyntheticTokens, opt.tokens));
    }
  }
  if (opt.layer < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("--layer must be >= 0, got %d", opt.layer));
  }
  std::optional<quant::Calibration> user_cal;
  if (!opt.calibration.empty()) {
    OSCARKV_ASSIGN_OR_RETURN(user_cal, quant::ReadCalibrationFile(opt.calibration));
    if (opt.layer >= static_cast<int>(user_cal->layers.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--layer %d out of range: %s has %d layers", opt.layer,
                          opt.calibration, user_cal->layers.size()));
    }
  }
  const quant::KvSide side = opt.kind == "k" ? quant::KvSide::kKey : quant::KvSide::kValue;
  std::vector<float> x;
  int tokens = 0, heads = 0, d = 0;
  std::vector<quant::Calibration> cals;
  if (!opt.tensor.empty()) {
    OSCARKV_ASSIGN_OR_RETURN(quant::NpyArray arr, quant::ReadNpy(opt.tensor));
    if (arr.shape.size() != 3) {
      return absl::InvalidArgumentError(opt.tensor + ": want a [T, H, D] tensor");
    }
    tokens = static_cast<int>(arr.shape[0]);
    heads = static_cast<int>(arr.shape[1]);
    d = static_cast<int>(arr.shape[2]);
    x = std::move(arr.data);
    std::cout << absl::StrFormat("tensor %s: %s [T=%d, H=%d, D=%d]\n", opt.tensor,
                                 side == quant::KvSide::kKey ? "K" : "V", tokens, heads, d);
  } else {
    d = opt.head_dim;
    const int calib_tokens = 2048;
    const quant::LayerActivations train = quant::SyntheticActivations(calib_tokens, 8, 2, d, 1);
    const quant::LayerActivations eval = quant::SyntheticActivations(opt.tokens, 8, 2, d, 2);
    tokens = eval.tokens;
    heads = eval.kv_heads;
    x = side == quant::KvSide::kKey ? eval.k : eval.v;
    OSCARKV_ASSIGN_OR_RETURN(auto acc, quant::CovarianceAccumulator::Create(8, 2, d));
    OSCARKV_RETURN_IF_ERROR(acc.AddPass1(train.q, train.k, train.v, calib_tokens));
    OSCARKV_RETURN_IF_ERROR(acc.AddPass2(train.k, train.v, calib_tokens));
    OSCARKV_ASSIGN_OR_RETURN(quant::LayerCovariances cov, acc.Finish());
    const std::vector<quant::LayerCovariances> covs = {cov};
    for (auto [ko, vo] : {std::pair{"qqt", "sst"}, std::pair{"ktk", "vtv"}}) {
      OSCARKV_ASSIGN_OR_RETURN(quant::Calibration cal,
                               quant::CalibrateFromCovariances(covs, ko, vo, 0, 0.96f, 0.92f));
      cals.push_back(std::move(cal));
    }
    std::cout << absl::StrFormat(
        "SYNTHETIC tensor (no --tensor given): heavy-tailed Student-t(3) rows with a planted "
        "covariance and offset K channels, %s [T=%d, H=%d, D=%d]; M5/M6 calibrated on %d "
        "separate synthetic tokens (H_q=8).\n",
        side == quant::KvSide::kKey ? "K" : "V", tokens, heads, d, calib_tokens);
  }
  if (user_cal.has_value()) cals.push_back(std::move(*user_cal));
  std::cout << absl::StrFormat("%-15s %-3s %7s %12s %10s %10s  %s\n", "codec", "id", "bpe",
                               "rel_frob", "max_abs", "cosine", "note");
  for (const CodecSpec& s : quant::AllCodecs()) {
    const quant::Calibration* cal = nullptr;
    if (s.needs_calibration) {
      for (const quant::Calibration& c : cals) {
        if (c.k_objective == s.k_objective && c.v_objective == s.v_objective) cal = &c;
      }
      if (cal == nullptr) {
        std::cout << absl::StrFormat("%-15s %-3s %7s %12s %10s %10s  skipped: needs --calibration "
                                     "with objectives %s/%s\n",
                                     std::string(s.name), std::string(s.paper_id), "-", "-", "-",
                                     "-", std::string(s.k_objective),
                                     std::string(s.v_objective));
        continue;
      }
    }
    auto codec = quant::Codec::Create(s, d, cal, opt.tensor.empty() ? 0 : opt.layer);
    if (!codec.ok()) {
      std::cout << absl::StrFormat("%-15s %-3s  error: %s\n", std::string(s.name),
                                   std::string(s.paper_id), codec.status().ToString());
      continue;
    }
    OSCARKV_ASSIGN_OR_RETURN(quant::ReconstructionError e,
                             quant::MeasureReconstruction(**codec, side, x, tokens, heads));
    std::cout << absl::StrFormat("%-15s %-3s %7.3f %12.5f %10.4f %10.5f  clip %.2f, %d tokens\n",
                                 std::string(s.name), std::string(s.paper_id), e.bits_per_element,
                                 e.rel_frobenius, e.max_abs, e.mean_cosine,
                                 (*codec)->clip_ratio(side), e.tokens);
  }
  std::cout << "All tokens quantized (no BF16 windows); error in the original basis. bpe: bits "
               "per element of this side's segment (64-token block).\n";
  return absl::OkStatus();
}

void RegisterCodecsCommand(CLI::App& app, CommandResult& result) {
  CLI::App* cmd = app.add_subcommand("codecs", "KV-cache codecs: list them, measure them");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "List codecs with properties and bits/element");
  list->callback([&result] { result.status = ListCodecs(); });
  auto opt = std::make_shared<ReportOptions>();
  CLI::App* report = cmd->add_subcommand(
      "report", "Reconstruction error of every codec on a K or V tensor (.npy [T, H, D] f32)");
  report->add_option("--tensor", opt->tensor,
                     "K or V tensor (.npy [T,H,D] float32); default: synthetic");
  report->add_option("--calibration", opt->calibration, "calibration file for oscar/oscar-gram");
  report->add_option("--kind", opt->kind, "k or v: which side's codec to apply")
      ->check(CLI::IsMember({"k", "v"}));
  report->add_option("--layer", opt->layer, "layer of the calibration file to use");
  report->add_option("--head-dim", opt->head_dim,
                     "synthetic tensor head_dim (power of two, 32 to 512)");
  report->add_option("--tokens", opt->tokens, "synthetic tensor tokens (32 to 65536)");
  report->callback([&result, opt] { result.status = Report(*opt); });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterCodecsCommand);
}  // namespace oscarkv::tools
