// `oscarkv info`: architecture facts of a model file and its KV bytes per token per codec.
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/int2_block.h"
#include "lib/model/gguf_file.h"
#include "lib/model/model_config.h"
#include "lib/model/model.h"
#include "tools/commands.h"
#if __has_include("lib/quant/codec_spec.h")
#include "lib/quant/codec_spec.h"
#define OSCARKV_INFO_HAVE_CODECS 1
#endif

namespace oscarkv::tools {
namespace {

absl::Status RunInfo(const std::string& model_arg) {
  OSCARKV_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(model_arg));
  // GGUF file or Hugging Face checkpoint directory (config.json); no weights are read.
  std::string name = "?";
  OSCARKV_ASSIGN_OR_RETURN(model::ModelConfig c, model::ReadModelConfig(path, &name));
  std::cout << absl::StrFormat(
      "file:           %s\nname:           %s\narchitecture:   %s\nlayers:         %d\n"
      "d_model:        %d\nq heads:        %d\nkv heads:       %d\nhead_dim:       %d\n"
      "ffn:            %d\nvocab:          %d\ncontext:        %d\nrope theta:     %g (%s)\n"
      "rms eps:        %g\ntied embedding: %s\n",
      path, name, c.arch_name, c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.head_dim,
      c.d_ff, c.vocab_size, c.context_length, c.rope_theta,
      c.rope_style == model::RopeStyle::kNeox ? "neox" : "adjacent pairs", c.norm_eps,
      c.tied_embeddings ? "yes" : "no");
  std::cout << absl::StrFormat("KV bytes/token: %d (bf16, all layers, K+V)\n",
                               c.KvBytesPerTokenBf16());
#ifdef OSCARKV_INFO_HAVE_CODECS
  const int tokens = kvformat::kDefaultBlockTokens;
  for (const quant::CodecSpec& spec : quant::AllCodecs()) {
    const size_t bytes = kvformat::PayloadBytes(spec.id, kvformat::BlockKind::kQuantized,
                                                c.num_layers, c.num_kv_heads, c.head_dim, tokens);
    std::cout << absl::StrFormat("  %-4s %-16s %9.1f bytes/token in history blocks (%.2f bits/elem)\n",
                                 std::string(spec.paper_id), std::string(spec.name),
                                 static_cast<double>(bytes) / tokens,
                                 8.0 * bytes / tokens / (2.0 * c.num_layers * c.num_kv_heads * c.head_dim));
  }
#endif
  return absl::OkStatus();
}

void RegisterInfoCommand(CLI::App& app, CommandResult& result) {
  auto model_arg = std::make_shared<std::string>("default");
  CLI::App* cmd = app.add_subcommand("info", "Print a model's architecture and KV sizes");
  cmd->add_option("--model", *model_arg, "GGUF path, Hugging Face checkpoint directory (config.json + safetensors), or 'default'");
  cmd->callback([model_arg, &result] { result.status = RunInfo(*model_arg); });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterInfoCommand);
}  // namespace oscarkv::tools
