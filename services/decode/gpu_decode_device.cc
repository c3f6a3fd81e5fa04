#include "services/decode/gpu_decode_device.h"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/model_gpu/block_import.h"
#include "lib/model_gpu/gpu_model.h"

namespace oscarkv::decode {
namespace {

using model_gpu::CudaStatus;

class GpuDecodeDevice;

class GpuHeldSequence final : public HeldSequence {
 public:
  GpuHeldSequence(GpuDecodeDevice* device, int64_t id, int64_t length, int64_t max_length)
      : device_(device), id_(id), length_(length), max_length_(max_length) {}
  ~GpuHeldSequence() override;
  int64_t length() const override { return length_.load(); }
  int64_t kv_bytes() const override;
  int64_t remaining_tokens() const override { return max_length_ - length_.load(); }
  int64_t id() const { return id_; }
  void Appended() { length_.fetch_add(1); }

 private:
  GpuDecodeDevice* device_;
  const int64_t id_;
  std::atomic<int64_t> length_;
  const int64_t max_length_;
};

class GpuDecodeDevice final : public DecodeDevice {
 public:
  GpuDecodeDevice(const engine::ServingEngine* engine, const GpuDecodeDeviceOptions& options,
                  model_gpu::KvPageTableConfig shape, std::unique_ptr<model_gpu::GpuModel> gpu)
      : engine_(engine), options_(options), shape_(shape), gpu_(std::move(gpu)) {}

  std::string name() const override { return absl::StrCat("cuda:", options_.device); }

  absl::StatusOr<std::unique_ptr<HeldSequence>> Build(std::span<const kvformat::BlockView> blocks,
                                                      int64_t max_new_tokens) override {
    // Host work first, outside the lock, so steps are not held up by it.
    const model_gpu::ClipRatios clips = model_gpu::EffectiveClipRatios(engine_->tier_config());
    OSCARKV_ASSIGN_OR_RETURN(
        model_gpu::PackedKv packed,
        model_gpu::PackedKvFromBlocks(shape_, engine_->codec().id, clips.k, clips.v, blocks));
    const int64_t length = packed.layout.length;
    std::lock_guard<std::mutex> lock(mu_);
    OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
    if (staging_.bytes() < packed.bytes.size()) {
      OSCARKV_RETURN_IF_ERROR(staging_.Allocate(packed.bytes.size(), "decode import staging"));
    }
    OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(staging_.get(), packed.bytes.data(),
                                                  packed.bytes.size(), cudaMemcpyHostToDevice),
                                       "copying a sequence's KV to the GPU"));
    const int64_t id = next_id_++;
    OSCARKV_RETURN_IF_ERROR(gpu_->AddPackedSequence(
        id, length, length + max_new_tokens,
        std::span<const std::byte>(staging_.as<std::byte>(), packed.bytes.size())));
    return std::make_unique<GpuHeldSequence>(this, id, length, length + max_new_tokens);
  }

  absl::Status Step(std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
                    std::vector<float>* logits) override {
    std::vector<int64_t> ids(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      ids[i] = static_cast<GpuHeldSequence*>(seqs[i])->id();
    }
    std::lock_guard<std::mutex> lock(mu_);
    OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
    OSCARKV_RETURN_IF_ERROR(gpu_->DecodeStep(ids, tokens, &greedy_, logits));
    for (HeldSequence* s : seqs) static_cast<GpuHeldSequence*>(s)->Appended();
    return absl::OkStatus();
  }

  // Bytes of the pages a sequence of `length` tokens holds (a function of the length alone).
  int64_t KvBytes(int64_t length) const {
    const model_gpu::PageCount p = model_gpu::PagesHeld(shape_, length);
    return p.bf16 * model_gpu::Bf16PageBytes(shape_) + p.int2 * model_gpu::Int2PageBytes(shape_);
  }

  void Remove(int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cudaSetDevice(options_.device) == cudaSuccess) gpu_->RemoveSequence(id);
  }

 private:
  const engine::ServingEngine* engine_;
  const GpuDecodeDeviceOptions options_;
  const model_gpu::KvPageTableConfig shape_;
  std::mutex mu_;  // one thread at a time drives the GpuModel
  std::unique_ptr<model_gpu::GpuModel> gpu_;         // guarded by mu_
  model_gpu::DeviceBuffer staging_;                   // guarded by mu_
  std::vector<int32_t> greedy_;                       // guarded by mu_
  int64_t next_id_ = 1;                               // guarded by mu_
};

GpuHeldSequence::~GpuHeldSequence() { device_->Remove(id_); }

int64_t GpuHeldSequence::kv_bytes() const { return device_->KvBytes(length_.load()); }

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeDevice>> NewGpuDecodeDevice(
    const engine::ServingEngine* engine, const GpuDecodeDeviceOptions& options) {
  OSCARKV_ASSIGN_OR_RETURN(model_gpu::KvPageTableConfig shape,
                           model_gpu::GpuPageShape(engine->model().config(), engine->codec()));
  model_gpu::GpuModelOptions o;
  o.device = options.device;
  o.max_batch = options.max_batch;
  o.max_prompt_tokens = options.max_batch;  // never prefills: scratch for decode rows only
  o.kv_budget_bytes = options.kv_budget_bytes;
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<model_gpu::GpuModel> gpu,
                           model_gpu::GpuModel::ForEngine(*engine, o));
  return std::make_unique<GpuDecodeDevice>(engine, options, shape, std::move(gpu));
}

}  // namespace oscarkv::decode
