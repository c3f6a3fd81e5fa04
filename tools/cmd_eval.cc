// `oscarkv eval`: quality of the KV codecs on a real model and real text (lib/eval/harness.h).
//   oscarkv eval --model default --text data/text/austen/emma.txt --codecs bf16,oscar
//       --context 2048,4096 --windows 20 --out /tmp/q [--calibration F] [--quick] [--niah]
//       [--greedy]
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "lib/eval/harness.h"
#include "tools/commands.h"

namespace oscarkv::tools {
namespace {

void RegisterEvalCommand(CLI::App& app, CommandResult& result) {
  auto cfg = std::make_shared<eval::EvalConfig>();
  auto quick = std::make_shared<bool>(false);
  auto no_plots = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "eval", "Measure codec quality (decode-equivalent teacher forcing, NIAH, greedy agreement)");
  cmd->add_option("--model", cfg->model, "GGUF path, or 'default' (SmolLM2-135M-Instruct)");
  cmd->add_option("--text", cfg->texts, "Evaluation text files")->required()->expected(1, -1);
  cmd->add_option("--codecs", cfg->codecs,
                  "Comma-separated codecs (default: all M0-M8), each NAME[@K/V][+gN]: clip ratios "
                  "K/V override a clipping codec's, +gN quantises a per-token codec in groups of N "
                  "channels (emulation only), e.g. oscar@0.90/0.84+g32")
      ->delimiter(',');
  cmd->add_option("--context", cfg->contexts, "Window lengths (default 2048,4096,8192)")
      ->delimiter(',');
  cmd->add_option("--windows", cfg->windows, "Windows per context: one value or one per context")
      ->delimiter(',');
  cmd->add_option("--out", cfg->out_dir, "Output folder")->required();
  cmd->add_option("--calibration", cfg->calibration_files,
                  "Calibration files, one per objective (qqt/sst: oscar; ktk/vtv: oscar-gram); "
                  "what none gives is calibrated here from --calibration-text")
      ->delimiter(',');
  cmd->add_option("--calibration-text", cfg->calibration_texts,
                  "Calibration texts (default: Austen prideprejudice + sensesensibility)")
      ->expected(1, -1);
  cmd->add_option("--calibration-tokens", cfg->calibration_tokens, "Calibration tokens (20480)");
  cmd->add_option("--k-clip", cfg->k_clip,
                  "Override the K clip ratio of clipping codecs, in (0.5, 1]");
  cmd->add_option("--v-clip", cfg->v_clip,
                  "Override the V clip ratio of clipping codecs, in (0.5, 1]");
  cmd->add_option("--score-from", cfg->score_from, "First scored position (384)");
  cmd->add_option("--fidelity-windows", cfg->fidelity_windows,
                  "Windows with per-layer attention fidelity (1)");
  cmd->add_flag("--allow-overlap", cfg->allow_overlap,
                "Warn instead of refusing text that overlaps the calibration text");
  cmd->add_flag("--quick", *quick, "Small settings (< 10 min on 2 cores)");
  cmd->add_flag("--niah", cfg->niah, "Run the needle-in-a-haystack test");
  cmd->add_option("--niah-context", cfg->niah_contexts, "NIAH lengths (2048,4096,8192)")
      ->delimiter(',');
  cmd->add_option("--niah-depth", cfg->niah_depths, "NIAH depths in percent (10,30,50,70,90)")
      ->delimiter(',');
  cmd->add_option("--niah-trials", cfg->niah_trials, "Haystacks per length x depth (1)");
  cmd->add_flag("--greedy", cfg->greedy, "Run greedy-agreement generation");
  cmd->add_option("--greedy-prompts", cfg->greedy_prompts, "Prompts (50)");
  cmd->add_option("--greedy-prompt-tokens", cfg->greedy_prompt_tokens, "Prompt tokens (512)");
  cmd->add_option("--greedy-new-tokens", cfg->greedy_new_tokens, "New tokens (128)");
  cmd->add_flag("--no-plots", *no_plots, "Skip the PNG plots");
  cmd->add_option("--seed", cfg->seed, "Seed of window choice and bootstrap")
      ->check(NotNegative());
  cmd->add_option("--threads", cfg->threads, "CPU threads (0 = OpenBLAS default)");
  cmd->add_option("--jobs", cfg->jobs,
                  "(window, codec) forwards run in parallel, one BLAS thread each (1); same "
                  "results as --jobs 1 --threads 1");
  cmd->add_option("--group-size", cfg->group_size,
                  "Lever: per-token codecs quantise in groups of N channels (emulation only; "
                  "0 = one group per row, the stored format)");
  cmd->callback([cfg, quick, no_plots, cmd, &result] {
    eval::EvalConfig c = *cfg;
    if (*quick) {
      eval::ApplyQuick(&c);
      // Explicit flags win over --quick's settings.
      if (cmd->count("--context")) c.contexts = cfg->contexts;
      if (cmd->count("--windows")) c.windows = cfg->windows;
      if (cmd->count("--calibration-tokens")) c.calibration_tokens = cfg->calibration_tokens;
      if (cmd->count("--niah-context")) c.niah_contexts = cfg->niah_contexts;
      if (cmd->count("--niah-depth")) c.niah_depths = cfg->niah_depths;
      if (cmd->count("--niah-trials")) c.niah_trials = cfg->niah_trials;
      if (cmd->count("--greedy-prompts")) c.greedy_prompts = cfg->greedy_prompts;
      if (cmd->count("--greedy-new-tokens")) c.greedy_new_tokens = cfg->greedy_new_tokens;
      if (cmd->count("--greedy-prompt-tokens")) {
        c.greedy_prompt_tokens = cfg->greedy_prompt_tokens;
      }
    }
    c.plots = !*no_plots;
    // The exact command line, for results.json.
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string arg, line;
    while (std::getline(in, arg, '\0')) line += (line.empty() ? "" : " ") + arg;
    c.command_line = line;
    result.status = eval::RunEval(c);
  });
}

}  // namespace
OSCARKV_REGISTER_COMMAND(RegisterEvalCommand);
}  // namespace oscarkv::tools
