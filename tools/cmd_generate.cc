// `oscarkv generate`: runs the CPU model on a prompt, streaming tokens to stdout as they are
// produced; prefill and decode tokens/s go to stderr at the end.
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
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
  std::string codec = "bf16";     // KV cache codec; Default: bf16
};

absl::Status RunGenerate(const GenerateFlags& f) {
  if (f.codec != "bf16") {
    return absl::UnimplementedError(absl::StrCat(
        "--codec ", f.codec, " is not yet wired into generate (only bf16 for now)"));
  }
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(f.model));
  model::ModelOptions opts;
  opts.threads = f.threads;
  OSCARKV_ASSIGN_OR_RETURN(auto m, model::Model::Load(path, opts));
  const model::Tokenizer& tok = m->tokenizer();
  std::string text = f.prompt;
  if (f.chat) {
    model::ChatMessage msg{"user", f.prompt};
    OSCARKV_ASSIGN_OR_RETURN(text, tok.ApplyChatTemplate(std::span(&msg, 1), true));
  }
  std::vector<int32_t> ids = tok.Encode(text, /*add_special=*/true);
  if (ids.empty()) return absl::InvalidArgumentError("empty prompt");
  model::GenerateOptions g;
  g.max_new_tokens = f.max_tokens;
  g.temperature = f.temperature;
  g.seed = f.seed;
  model::GenerateStats stats;
  if (!f.chat) std::cout << f.prompt << std::flush;
  auto out = m->Generate(ids, g, [&](int32_t id) {
    if (!tok.IsEndOfGeneration(id)) std::cout << tok.TokenToPiece(id) << std::flush;
    return true;
  }, &stats);
  OSCARKV_RETURN_IF_ERROR(out.status());
  std::cout << "\n";
  const double prefill_tps = stats.prompt_tokens / std::max(stats.prefill_seconds, 1e-9);
  const int64_t steps = stats.generated_tokens - 1;
  const double decode_tps = steps > 0 ? steps / std::max(stats.decode_seconds, 1e-9) : 0.0;
  std::cerr << absl::StrFormat(
      "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s)\n",
      stats.prompt_tokens, stats.prefill_seconds, prefill_tps, steps, stats.decode_seconds,
      decode_tps);
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
  cmd->add_option("--codec", flags->codec, "KV cache codec (only bf16 is wired so far)");
  cmd->callback([flags, &result] { result.status = RunGenerate(*flags); });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterGenerateCommand);
}  // namespace oscarkv::tools
