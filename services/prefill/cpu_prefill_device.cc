// The CPU prefill device: ServingEngine::Prefill.
#include <utility>

#include "lib/base/status_macros.h"
#include "services/prefill/prefill_device.h"

namespace oscarkv::prefill {
namespace {

class CpuPrefillDevice final : public PrefillDevice {
 public:
  explicit CpuPrefillDevice(const engine::ServingEngine* engine) : engine_(engine) {}
  std::string name() const override { return "cpu"; }
  bool shares_kvstore() const override { return true; }
  std::vector<kvformat::BlockKey> ReusableKeys(std::span<const int32_t> prompt) const override {
    return engine_->ReusableKeys(prompt);
  }

  absl::StatusOr<DevicePrefillResult> Prefill(std::span<const int32_t> prompt,
                                              std::span<const kvformat::BlockView> reused,
                                              const DevicePrefillOptions& options) override {
    // (want_packed: never offered.)
    DevicePrefillResult out;
    const int top_n = options.prompt_logprobs;
    const int64_t vocab = engine_->model().config().vocab_size;
    const engine::ChunkLogitsSink sink = [&](int64_t first, std::span<const float> logits) {
      engine::AppendPromptLogprobs(prompt, first, logits, vocab, top_n, &out.prompt_logprobs);
      return absl::OkStatus();
    };
    if (top_n >= 0) {
      reused = {};  // every position needs its logits
      if (!prompt.empty()) out.prompt_logprobs.reserve(prompt.size() - 1);
    }
    OSCARKV_ASSIGN_OR_RETURN(
        engine::PrefillResult r,
        engine_->Prefill(prompt, reused, /*build_sequence=*/false, top_n >= 0 ? &sink : nullptr,
                         &options.stop_check));
    out.last_logits = std::move(r.last_logits);
    out.blocks = std::move(r.blocks);
    out.reused_tokens = r.reused_tokens;
    out.computed_tokens = r.computed_tokens;
    return out;
  }

 private:
  const engine::ServingEngine* engine_;
};

}  // namespace

std::unique_ptr<PrefillDevice> NewCpuPrefillDevice(const engine::ServingEngine* engine) {
  return std::make_unique<CpuPrefillDevice>(engine);
}

}  // namespace oscarkv::prefill
