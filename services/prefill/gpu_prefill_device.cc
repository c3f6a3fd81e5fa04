#include "services/prefill/gpu_prefill_device.h"

#include <cuda_runtime.h>

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model_gpu/block_import.h"
#include "lib/model_gpu/gpu_model.h"

namespace oscarkv::prefill {
namespace {

using model_gpu::CudaStatus;

class GpuPrefillDevice final : public PrefillDevice {
 public:
  GpuPrefillDevice(const engine::ServingEngine* engine, const GpuPrefillDeviceOptions& options,
                   model_gpu::KvPageTableConfig shape, std::unique_ptr<model_gpu::GpuModel> gpu)
      : engine_(engine), options_(options), shape_(shape), gpu_(std::move(gpu)) {}

  std::string name() const override { return absl::StrCat("cuda:", options_.device); }
  bool shares_kvstore() const override { return !options_.one_pass; }
  std::vector<kvformat::BlockKey> ReusableKeys(std::span<const int32_t> prompt) const override {
    return model_gpu::CutSpecFor(*engine_, prompt, gpu_->numerics_tag()).keys;
  }

  absl::StatusOr<DevicePrefillResult> Prefill(
      std::span<const int32_t> prompt, std::span<const kvformat::BlockView> reused) override {
    return options_.one_pass ? PrefillOnePass(prompt) : PrefillChunked(prompt, reused);
  }

 private:
  absl::StatusOr<DevicePrefillResult> PrefillChunked(
      std::span<const int32_t> prompt, std::span<const kvformat::BlockView> reused) {
    const model_gpu::BlockCutSpec cut =
        model_gpu::CutSpecFor(*engine_, prompt, gpu_->numerics_tag());
    model_gpu::ChunkedPrefillResult r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
      OSCARKV_ASSIGN_OR_RETURN(r, gpu_->PrefillChunked(prompt, cut, engine_->options().chunk_tokens,
                                                      reused));
    }
    DevicePrefillResult out;
    out.last_logits = std::move(r.last_logits);
    out.reused_tokens = r.reused_tokens;
    out.computed_tokens = static_cast<int64_t>(prompt.size()) - r.reused_tokens;
    out.blocks = ToSequenceBlocks(cut, std::move(r.blocks));
    return out;
  }

  static std::vector<engine::SequenceBlock> ToSequenceBlocks(
      const model_gpu::BlockCutSpec& cut, std::vector<std::vector<std::byte>> blocks) {
    std::vector<engine::SequenceBlock> out;
    for (size_t b = 0; b < blocks.size(); ++b) {
      engine::SequenceBlock block;
      block.reusable = b < cut.keys.size();
      if (block.reusable) block.key = cut.keys[b];
      block.bytes = std::move(blocks[b]);
      out.push_back(std::move(block));
    }
    return out;
  }

  absl::StatusOr<DevicePrefillResult> PrefillOnePass(std::span<const int32_t> prompt) {
    const model_gpu::BlockCutSpec cut =
        model_gpu::CutSpecFor(*engine_, prompt, gpu_->numerics_tag());
    const int64_t n = static_cast<int64_t>(prompt.size());
    DevicePrefillResult out;
    model_gpu::TailRows tail;
    tail.begin = cut.reuse_boundary;
    model_gpu::PackedKv packed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
      constexpr int64_t kId = 1;  // one prompt at a time, freed before the lock is released
      OSCARKV_RETURN_IF_ERROR(
          gpu_->AddSequence(kId, prompt, n, nullptr, &out.last_logits, nullptr, &tail));
      packed.layout = gpu_->PackedLayout(n);
      absl::Status st;
      if (staging_.bytes() < static_cast<size_t>(packed.layout.bytes())) {
        st = staging_.Allocate(packed.layout.bytes(), "prefill export staging");
      }
      if (st.ok()) {
        st = gpu_->PackSequence(
            kId, std::span<std::byte>(staging_.as<std::byte>(), packed.layout.bytes()));
      }
      if (st.ok()) {
        packed.bytes.resize(packed.layout.bytes());
        st = CudaStatus(cudaMemcpy(packed.bytes.data(), staging_.get(), packed.bytes.size(),
                                   cudaMemcpyDeviceToHost),
                        "copying the prompt's KV from the GPU");
      }
      gpu_->RemoveSequence(kId);
      OSCARKV_RETURN_IF_ERROR(st);
    }
    OSCARKV_ASSIGN_OR_RETURN(std::vector<std::vector<std::byte>> blocks,
                             model_gpu::BlocksFromPackedKv(shape_, packed, tail, cut));
    out.blocks = ToSequenceBlocks(cut, std::move(blocks));
    out.computed_tokens = n;
    return out;
  }

  const engine::ServingEngine* engine_;
  const GpuPrefillDeviceOptions options_;
  const model_gpu::KvPageTableConfig shape_;
  std::mutex mu_;  // one prompt at a time on the GPU
  std::unique_ptr<model_gpu::GpuModel> gpu_;  // guarded by mu_
  model_gpu::DeviceBuffer staging_;            // guarded by mu_
};

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillDevice>> NewGpuPrefillDevice(
    const engine::ServingEngine* engine, const GpuPrefillDeviceOptions& options) {
  OSCARKV_ASSIGN_OR_RETURN(model_gpu::KvPageTableConfig shape,
                           model_gpu::GpuPageShape(engine->model().config(), engine->codec()));
  model_gpu::GpuModelOptions o;
  o.device = options.device;
  o.max_batch = 1;
  o.max_prompt_tokens = options.max_prompt_tokens;
  // The paged cache holds the prompt only in one_pass mode; the chunked prefill keeps its own
  // buffers, so it gets a token pool there.
  o.kv_budget_bytes = options.one_pass ? options.kv_budget_bytes : int64_t{64} << 20;
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<model_gpu::GpuModel> gpu,
                           model_gpu::GpuModel::ForEngine(*engine, o));
  return std::make_unique<GpuPrefillDevice>(engine, options, shape, std::move(gpu));
}

}  // namespace oscarkv::prefill
