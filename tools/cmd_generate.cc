// `oscarkv generate`: runs the CPU model on a prompt with the KV cache in a codec (default oscar),
// through the same ServingEngine as the prefill and decode workers (chunked prefill to blocks,
// three-tier cache rebuilt from them, decode steps), streaming tokens to stdout as they are
// produced; prefill and decode tokens/s go to stderr at the end. With `--device cuda` the same
// prompt runs on the GPU runtime (lib/model_gpu) instead.
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
#include "services/decode/decode_server.h"
#include "tools/commands.h"
#ifdef OSCARKV_HAVE_MODEL_GPU
#include "lib/engine/quant_kv_cache.h"
#include "lib/model_gpu/gpu_model.h"
#endif

namespace oscarkv::tools {
namespace {

struct GenerateFlags {
  std::string model = "default";  // path or "default"
  std::string prompt;
  int max_tokens = 64;            // Default: 64
  bool chat = false;              // wrap the prompt in the model's chat template; Default: false
  float temperature = 0.0f;       // 0 = greedy; Default: 0
  float top_p = 1.0f;             // Default: 1 (off)
  int top_k = 0;                  // Default: 0 (off)
  float presence_penalty = 0.0f;  // OpenAI's; Default: 0
  float frequency_penalty = 0.0f; // OpenAI's; Default: 0
  uint64_t seed = 0;              // Default: 0
  int threads = 0;                // Default: 0 (OpenBLAS default)
  std::string codec = "oscar";    // KV cache codec; Default: oscar
  std::string calibration;        // calibration file; Default: the default model's, for oscar
  std::string device = "cpu";     // cpu | cuda; Default: cpu
  int gpu = 0;                    // CUDA device ordinal with --device cuda; Default: 0
};

engine::SamplingParams SamplingFromFlags(const GenerateFlags& f) {
  return {.temperature = f.temperature,
          .top_p = f.top_p,
          .top_k = f.top_k,
          .seed = f.seed,
          .presence_penalty = f.presence_penalty,
          .frequency_penalty = f.frequency_penalty};
}

// Flags that need no model; checked before it loads.
absl::Status ValidateFlags(const GenerateFlags& f) {
  if (f.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-tokens must be >= 1, got ", f.max_tokens));
  }
  if (f.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--threads must be >= 0, got ", f.threads));
  }
  if (f.gpu < 0) return absl::InvalidArgumentError(absl::StrCat("--gpu must be >= 0, got ", f.gpu));
  return SamplingFromFlags(f).Validate();
}

// The calibration file: --calibration, else the default model's default file found the way
// `oscarkv serve` finds it (working directory, then this build's source tree), else its
// relative path so that the error names it.
std::string CalibrationPath(const GenerateFlags& f) {
  if (f.calibration.empty() && f.model == "default") {
    std::string found = decode::ResolveCalibrationPath("", f.codec);
    if (!found.empty()) return found;
  }
  return engine::ResolveCalibrationPath(f.calibration, f.model, f.codec);
}

// `--device cuda`: the same prompt through lib/model_gpu (bf16 weights, paged three-tier KV on
// the GPU). Greedy only; the sampler runs on the host over logits when --temperature > 0.
absl::Status RunGenerateGpu(const GenerateFlags& f, const model::Model& m,
                            const std::vector<int32_t>& ids) {
#ifndef OSCARKV_HAVE_MODEL_GPU
  return absl::UnimplementedError("this oscarkv was built without CUDA (--device cuda)");
#else
  OSCARKV_ASSIGN_OR_RETURN(
      auto factory,
      engine::KvCacheFactory::Create(m.config(), f.codec, CalibrationPath(f)));
  OSCARKV_ASSIGN_OR_RETURN(auto weights, model_gpu::GpuWeights::Upload(m.config(), m.weights()));
  model_gpu::GpuModelOptions options;
  options.device = f.gpu;
  options.max_batch = 1;
  options.max_prompt_tokens = static_cast<int64_t>(ids.size());
  options.kv_budget_bytes = int64_t{1} << 30;
  OSCARKV_ASSIGN_OR_RETURN(auto gpu, model_gpu::GpuModel::Create(m.config(), std::move(weights),
                                                                 factory->tier_config(), options));
  engine::Sampler sampler(SamplingFromFlags(f));  // validated in RunGenerate
  const model::Tokenizer& tok = m.tokenizer();
  using Clock = std::chrono::steady_clock;
  std::vector<float> logits;
  int32_t greedy = 0;
  const auto t0 = Clock::now();
  OSCARKV_RETURN_IF_ERROR(gpu->AddSequence(1, ids, static_cast<int64_t>(ids.size()) + f.max_tokens,
                                           &greedy, &logits));
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  int generated = 0;
  const auto t1 = Clock::now();
  while (generated < f.max_tokens) {
    const int32_t next = sampler.Sample(logits);
    ++generated;
    if (tok.IsEndOfGeneration(next)) break;
    std::cout << tok.TokenToPiece(next) << std::flush;
    if (generated == f.max_tokens) break;
    const int64_t seq[] = {1};
    std::vector<int32_t> unused;
    OSCARKV_RETURN_IF_ERROR(gpu->DecodeStep(seq, {&next, 1}, &unused, &logits));
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  std::cout << "\n";
  const int steps = std::max(0, generated - 1);
  const model_gpu::SeqPages& pages = gpu->pages().seq(1);
  std::cerr << absl::StrFormat(
      "device cuda:%d, codec %s: %d tokens in KV (%d BF16 + %d INT2)\n"
      "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s)\n",
      f.gpu, f.codec, pages.length, pages.bf16_tokens, pages.int2_tokens, ids.size(), prefill_s,
      ids.size() / std::max(prefill_s, 1e-9), steps, decode_s, steps / std::max(decode_s, 1e-9));
  return absl::OkStatus();
#endif
}

absl::Status RunGenerate(const GenerateFlags& f) {
  // Bad flags fail before the model loads.
  OSCARKV_RETURN_IF_ERROR(ValidateFlags(f));
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(f.model));
  model::ModelOptions opts;
  opts.threads = f.threads;
  OSCARKV_ASSIGN_OR_RETURN(auto m, model::Model::Load(path, opts));
  OSCARKV_RETURN_IF_ERROR(RequireTokenizer(*m, "generate"));
  const model::Tokenizer& tok = m->tokenizer();
  std::string text = f.prompt;
  if (f.chat) {
    model::ChatMessage msg{"user", f.prompt};
    OSCARKV_ASSIGN_OR_RETURN(text, tok.ApplyChatTemplate(std::span(&msg, 1), true));
  }
  std::vector<int32_t> ids = tok.Encode(text, /*add_special=*/true);
  if (ids.empty()) return absl::InvalidArgumentError("empty prompt");
  const int context = m->config().context_length;  // 0 = the checkpoint does not say
  if (context > 0 && static_cast<int64_t>(ids.size()) + f.max_tokens > context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", ids.size(), " tokens) + --max-tokens ", f.max_tokens,
        " exceeds the model's context length ", context));
  }
  OSCARKV_ASSIGN_OR_RETURN(
      auto engine,
      engine::ServingEngine::Create(m.get(), {.codec = f.codec,
                                              .calibration_path = CalibrationPath(f)}));
  if (!f.chat) std::cout << f.prompt << std::flush;
  if (f.device == "cuda") {
    absl::Status s = RunGenerateGpu(f, *m, ids);
    if (!s.ok() && !f.chat) std::cout << std::endl;  // the error on a line of its own
    return s;
  }

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  OSCARKV_ASSIGN_OR_RETURN(engine::PrefillResult prefill, engine->Prefill(ids));
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  engine::Sampler sampler(SamplingFromFlags(f));  // validated in RunGenerate
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
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with the model (CPU, or the GPU with --device cuda)");
  cmd->add_option("--model", flags->model, "GGUF path, or 'default' (SmolLM2-135M-Instruct)");
  cmd->add_option("--prompt", flags->prompt, "Prompt text")->required();
  cmd->add_option("--max-tokens", flags->max_tokens, "Tokens to generate (default 64)");
  cmd->add_flag("--chat", flags->chat, "Apply the model's chat template to the prompt");
  cmd->add_option("--temperature", flags->temperature, "Sampling temperature; 0 = greedy");
  cmd->add_option("--top-p", flags->top_p, "Nucleus sampling threshold in (0, 1]; 1 = off");
  cmd->add_option("--top-k", flags->top_k, "Sample from the k most likely tokens; 0 = off");
  cmd->add_option("--presence-penalty", flags->presence_penalty,
                  "OpenAI's presence penalty over the generated tokens, in [-2, 2]");
  cmd->add_option("--frequency-penalty", flags->frequency_penalty,
                  "OpenAI's frequency penalty over the generated tokens, in [-2, 2]");
  cmd->add_option("--seed", flags->seed, "Sampling seed")->check(NotNegative());
  cmd->add_option("--threads", flags->threads, "CPU threads (0 = OpenBLAS default)");
  cmd->add_option("--codec", flags->codec,
                  "KV cache codec: bf16, oscar (default), oscar-hadamard, oscar-norot, oscar-gram");
  cmd->add_option("--calibration", flags->calibration,
                  "Calibration file for oscar/oscar-gram (default: the default model's, made by "
                  "scripts/setup.sh)");
  cmd->add_option("--device", flags->device,
                  "cpu (default) or cuda (the GPU runtime; codecs bf16 and the oscar family)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--gpu", flags->gpu, "CUDA device ordinal with --device cuda (default 0)");
  cmd->callback([flags, &result] { result.status = RunGenerate(*flags); });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterGenerateCommand);
}  // namespace oscarkv::tools
