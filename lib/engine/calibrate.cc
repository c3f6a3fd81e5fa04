#include "lib/engine/calibrate.h"

#include <xxhash.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/quant/activation_dump.h"

namespace oscarkv::engine {

uint64_t ModelFingerprint(const model::Model& model) {
  // A different checkpoint, quantisation or architecture changes the shape or these weights.
  const model::ModelConfig& c = model.config();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const int64_t dims[] = {c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.head_dim,
                          c.d_ff, c.vocab_size};
  XXH3_64bits_update(state, dims, sizeof(dims));
  XXH3_64bits_update(state, c.arch_name.data(), c.arch_name.size());
  const auto& w = model.weights();
  XXH3_64bits_update(state, w.token_embd.data(), w.token_embd.size() * sizeof(float));
  XXH3_64bits_update(state, w.output_norm.data(), w.output_norm.size() * sizeof(float));
  const uint64_t fingerprint = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return fingerprint;
}

absl::Status ValidateCalibrateOptions(const CalibrateOptions& options, int context_length) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (options.text_files.empty()) return bad("--text: no calibration text");
  if (options.window_tokens <= 0) return bad("--window must be > 0, got ", options.window_tokens);
  if (options.max_tokens <= 0) return bad("--tokens must be > 0, got ", options.max_tokens);
  if (options.max_tokens < options.window_tokens) {
    return bad("--tokens ", options.max_tokens, " is less than one --window of ",
               options.window_tokens);
  }
  if (context_length > 0 && options.window_tokens > context_length) {
    return bad("--window ", options.window_tokens, " exceeds the model's context length ",
               context_length);
  }
  if ((options.k_objective != "qqt" && options.k_objective != "ktk") ||
      (options.v_objective != "sst" && options.v_objective != "vtv")) {
    return bad("objectives must be qqt|ktk / sst|vtv, got ", options.k_objective, "/",
               options.v_objective);
  }
  // The file format's range (quant::CalibrateFromCovariances), checked before the forward pass.
  if (!(options.k_clip_ratio > 0.0f && options.k_clip_ratio <= 1.0f)) {
    return bad("--k-clip must be in (0, 1], got ", options.k_clip_ratio);
  }
  if (!(options.v_clip_ratio > 0.0f && options.v_clip_ratio <= 1.0f)) {
    return bad("--v-clip must be in (0, 1], got ", options.v_clip_ratio);
  }
  if (options.dump_tokens < 1) return bad("--dump-tokens must be >= 1, got ", options.dump_tokens);
  return absl::OkStatus();
}

absl::StatusOr<quant::Calibration> CalibrateModel(const model::Model& model,
                                                  const CalibrateOptions& options,
                                                  uint64_t model_fingerprint) {
  OSCARKV_RETURN_IF_ERROR(ValidateCalibrateOptions(options, model.config().context_length));
  std::string text;
  for (const std::string& path : options.text_files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot open calibration text ", path));
    std::stringstream buffer;
    buffer << in.rdbuf();
    text += buffer.str();
    text += "\n";
  }
  std::vector<int32_t> ids = model.tokenizer().Encode(text, /*add_special=*/false);
  const int64_t windows =
      std::min<int64_t>(static_cast<int64_t>(ids.size()), options.max_tokens) /
      options.window_tokens;
  if (windows == 0) {
    return absl::InvalidArgumentError(absl::StrCat("calibration text has ", ids.size(),
                                                   " tokens, less than one window of ",
                                                   options.window_tokens));
  }
  const model::ModelConfig& c = model.config();
  std::vector<quant::CovarianceAccumulator> accumulators;
  for (int l = 0; l < c.num_layers; ++l) {
    OSCARKV_ASSIGN_OR_RETURN(auto acc, quant::CovarianceAccumulator::Create(
                                           c.num_heads, c.num_kv_heads, c.head_dim));
    accumulators.push_back(std::move(acc));
  }
  // Pass 2 (sst) needs the final C_Q first, so K/V are kept for a second pass over them.
  const int64_t kv_row = int64_t{c.num_kv_heads} * c.head_dim;
  std::vector<std::vector<float>> keys(c.num_layers), values(c.num_layers);
  absl::Status hook_status;
  const int dump_tokens = options.dump_dir.empty() ? 0 : std::min(options.dump_tokens,
                                                                   options.window_tokens);
  std::vector<quant::LayerActivations> dump(dump_tokens > 0 ? c.num_layers : 0);
  int64_t window_index = 0;
  // The hook is installed on a const model; the forward calls it on this thread only.
  auto& mutable_model = const_cast<model::Model&>(model);
  mutable_model.set_qkv_hook([&](int layer, int64_t, int64_t tokens, const float* q,
                                 const float* k, const float* v) {
    const int64_t q_row = int64_t{c.num_heads} * c.head_dim;
    hook_status.Update(accumulators[layer].AddPass1({q, static_cast<size_t>(tokens * q_row)},
                                                    {k, static_cast<size_t>(tokens * kv_row)},
                                                    {v, static_cast<size_t>(tokens * kv_row)},
                                                    static_cast<int>(tokens)));
    if (window_index == 0 && dump_tokens > 0) {
      const int64_t n = std::min<int64_t>(tokens, dump_tokens);
      quant::LayerActivations& a = dump[layer];
      a = {.tokens = static_cast<int>(n), .q_heads = c.num_heads, .kv_heads = c.num_kv_heads,
           .head_dim = c.head_dim};
      a.q.assign(q, q + n * q_row);
      a.k.assign(k, k + n * kv_row);
      a.v.assign(v, v + n * kv_row);
    }
    keys[layer].insert(keys[layer].end(), k, k + tokens * kv_row);
    values[layer].insert(values[layer].end(), v, v + tokens * kv_row);
  });
  const int64_t total = windows * options.window_tokens;
  absl::Status run_status;
  for (int64_t w = 0; w < windows && run_status.ok(); ++w) {
    std::span<const int32_t> window(ids.data() + w * options.window_tokens,
                                    static_cast<size_t>(options.window_tokens));
    run_status = model.Forward(window).status();
    ++window_index;
    if (options.progress) options.progress((w + 1) * options.window_tokens, total);
  }
  mutable_model.set_qkv_hook({});
  OSCARKV_RETURN_IF_ERROR(run_status);
  OSCARKV_RETURN_IF_ERROR(hook_status);
  for (int l = 0; l < static_cast<int>(dump.size()); ++l) {
    OSCARKV_RETURN_IF_ERROR(quant::WriteLayerActivations(options.dump_dir, l, dump[l]));
  }

  std::vector<quant::LayerCovariances> covariances;
  for (int l = 0; l < c.num_layers; ++l) {
    const int64_t tokens = static_cast<int64_t>(keys[l].size()) / kv_row;
    OSCARKV_RETURN_IF_ERROR(
        accumulators[l].AddPass2(keys[l], values[l], static_cast<int>(tokens)));
    std::vector<float>().swap(keys[l]);
    std::vector<float>().swap(values[l]);
    OSCARKV_ASSIGN_OR_RETURN(auto cov, accumulators[l].Finish());
    covariances.push_back(std::move(cov));
  }
  return quant::CalibrateFromCovariances(covariances, options.k_objective, options.v_objective,
                                         model_fingerprint, options.k_clip_ratio,
                                         options.v_clip_ratio);
}

}  // namespace oscarkv::engine
