// `oscarkv generate`: runs the CPU model on a prompt with the KV cache in a codec (default oscar),
// through the same ServingEngine as the prefill and decode workers (chunked prefill to blocks,
// three-tier cache rebuilt from them, decode steps), streaming tokens to stdout as they are
// produced; prefill and decode tokens/s go to stderr at the end.
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include <algorithm>
#include <chrono>

#include "lib/base/status_macros.h"
#include "lib/engine/sampler.h"
#include "lib/engine/serving_engine.h"
#include "lib/model/model.h"
#include "tools/commands.h"

namespace oscarkv::tools {
namespace {

struct GenerateFlags {
  std::string model = "default";  // path or "default"
  std::string prompt;
  int max_tokens = 64;            // Default: 64
  bool chat = false;              // wrap the prompt in the model's chat template; Default: false
  float temperature = 0.0f;       // 0 = greedy; Default: 0
  uint64_t seed = 0;              // Default: 0
  int threads = 0;                // Default: 0 (OpenBLAS default)
  std::string codec = "oscar";    // KV cache codec; Default: oscar
  std::string calibration;        // calibration file; Default: the default model's, for oscar
};

absl::Status RunGenerate(const GenerateFlags& f) {
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(f.model));
  model::ModelOptions opts;
  opts.threads = f.threads;
  OSCARKV_ASSIGN_OR_RETURN(auto m, model::Model::Load(path, opts));
  OSCARKV_ASSIGN_OR_RETURN(
      auto engine,
      engine::ServingEngine::Create(
          m.get(), {.codec = f.codec,
                    .calibration_path = engine::ResolveCalibrationPath(f.calibration, f.model,
                                                                       f.codec)}));
  const model::Tokenizer& tok = m->tokenizer();
  std::string text = f.prompt;
  if (f.chat) {
    model::ChatMessage msg{"user", f.prompt};
    OSCARKV_ASSIGN_OR_RETURN(text, tok.ApplyChatTemplate(std::span(&msg, 1), true));
  }
  std::vector<int32_t> ids = tok.Encode(text, /*add_special=*/true);
  if (ids.empty()) return absl::InvalidArgumentError("empty prompt");
  if (!f.chat) std::cout << f.prompt << std::flush;

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  OSCARKV_ASSIGN_OR_RETURN(engine::PrefillResult prefill, engine->Prefill(ids));
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  engine::SamplingParams sampling{.temperature = f.temperature, .seed = f.seed};
  OSCARKV_RETURN_IF_ERROR(sampling.Validate());
  engine::Sampler sampler(sampling);
  std::vector<float> logits = std::move(prefill.last_logits);
  model::Sequence* seq = prefill.sequence.get();
  int generated = 0;
  const auto t1 = Clock::now();
  while (generated < f.max_tokens) {
    const int32_t next = sampler.Sample(logits);
    ++generated;
    if (tok.IsEndOfGeneration(next)) break;
    std::cout << tok.TokenToPiece(next) << std::flush;
    if (generated == f.max_tokens) break;
    OSCARKV_RETURN_IF_ERROR(engine->DecodeStep({&seq, 1}, {&next, 1}, &logits));
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  std::cout << "\n";
  const int steps = std::max(0, generated - 1);
  std::cerr << absl::StrFormat(
      "codec %s: KV %d bytes for %d tokens (%.2f bits/element)\n"
      "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s)\n",
      std::string(engine->codec().name), engine->SequenceKvBytes(*seq), seq->length(),
      static_cast<const engine::QuantKvCache&>(seq->cache()).tiers().BitsPerElement(),
      ids.size(), prefill_s, ids.size() / std::max(prefill_s, 1e-9), steps, decode_s,
      steps / std::max(decode_s, 1e-9));
  return absl::OkStatus();
}

void RegisterGenerateCommand(CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with the CPU model");
  cmd->add_option("--model", flags->model, "GGUF path, or 'default' (SmolLM2-135M-Instruct)");
  cmd->add_option("--prompt", flags->prompt, "Prompt text")->required();
  cmd->add_option("--max-tokens", flags->max_tokens, "Tokens to generate (default 64)");
  cmd->add_flag("--chat", flags->chat, "Apply the model's chat template to the prompt");
  cmd->add_option("--temperature", flags->temperature, "Sampling temperature; 0 = greedy");
  cmd->add_option("--seed", flags->seed, "Sampling seed");
  cmd->add_option("--threads", flags->threads, "CPU threads (0 = OpenBLAS default)");
  cmd->add_option("--codec", flags->codec,
                  "KV cache codec: bf16, oscar (default), oscar-hadamard, oscar-norot, oscar-gram");
  cmd->add_option("--calibration", flags->calibration,
                  "Calibration file for oscar/oscar-gram (default: the default model's, made by "
                  "scripts/setup.sh)");
  cmd->callback([flags, &result] { result.status = RunGenerate(*flags); });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterGenerateCommand);
}  // namespace oscarkv::tools
