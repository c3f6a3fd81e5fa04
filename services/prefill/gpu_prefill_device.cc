#include "services/prefill/gpu_prefill_device.h"

#include <cuda_runtime.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/checksum/byte_checksum_cuda.h"
#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/model_gpu/block_import.h"
#include "lib/model_gpu/gpu_model.h"
#include "services/prefill/outbox_ring.h"

namespace oscarkv::prefill {
namespace {

using model_gpu::CudaStatus;

class GpuPrefillDevice final : public PrefillDevice {
 public:
  GpuPrefillDevice(const engine::ServingEngine* engine, const GpuPrefillDeviceOptions& options,
                   model_gpu::KvPageTableConfig shape, std::unique_ptr<model_gpu::GpuModel> gpu,
                   transfer::TransferBackend* backend)
      : engine_(engine),
        options_(options),
        shape_(shape),
        gpu_(std::move(gpu)),
        backend_(backend),
        ring_(static_cast<uint64_t>(options.outbox_bytes)) {}

  ~GpuPrefillDevice() override {
    if (outbox_registered_) {
      if (absl::Status s = backend_->DeregisterMemory(outbox_handle_); !s.ok()) {
        LOG(WARNING) << "packed outbox deregistration failed: " << s;
      }
    }
  }

  // Allocates and registers the packed outbox when this device offers handoffs.
  absl::Status InitOutbox() {
    if (!options_.one_pass || !options_.packed_handoff || !backend_->capabilities().gpu_memory) {
      return absl::OkStatus();
    }
    OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
    OSCARKV_RETURN_IF_ERROR(outbox_.Allocate(options_.outbox_bytes, "the packed KV outbox"));
    OSCARKV_RETURN_IF_ERROR(checksum_scratch_.Allocate(sizeof(uint64_t), "checksum scratch"));
    OSCARKV_ASSIGN_OR_RETURN(
        transfer::RegisteredMemory reg,
        backend_->RegisterMemory(std::span<std::byte>(outbox_.as<std::byte>(), outbox_.bytes())));
    outbox_handle_ = reg.handle;
    outbox_descriptor_ = std::move(reg.remote_descriptor);
    outbox_registered_ = true;
    return absl::OkStatus();
  }

  std::string name() const override { return absl::StrCat("cuda:", options_.device); }
  bool shares_kvstore() const override { return !options_.one_pass; }
  bool offers_packed_kv() const override { return outbox_registered_; }
  std::vector<kvformat::BlockKey> ReusableKeys(std::span<const int32_t> prompt) const override {
    return model_gpu::CutSpecFor(*engine_, prompt, gpu_->numerics_tag()).keys;
  }
  std::string kv_numerics() const override { return gpu_->numerics_tag(); }

  absl::StatusOr<DevicePrefillResult> Prefill(std::span<const int32_t> prompt,
                                              std::span<const kvformat::BlockView> reused,
                                              const DevicePrefillOptions& options) override {
    // Scoring needs every row's logits, which the chunked prefill gives: it runs in one-pass
    // mode too (the blocks go to the decode worker as blocks; nothing reads the kvstore).
    const engine::PrefillStopCheck& stop = options.stop_check;
    if (options.prompt_logprobs >= 0) {
      return PrefillChunked(prompt, {}, stop, options.prompt_logprobs);
    }
    if (!options_.one_pass) return PrefillChunked(prompt, reused, stop);
    return options.want_packed && offers_packed_kv() ? PrefillPacked(prompt, stop)
                                                     : PrefillOnePass(prompt, stop);
  }

  int Sweep() override {
    std::lock_guard<std::mutex> lock(mu_);
    return ring_.DropExpired(absl::Now());
  }

 private:
  // Prefills run one at a time under mu_: one that waited there for a caller who has left
  // since stops before it starts.
  static absl::Status CheckStop(const engine::PrefillStopCheck& stop) {
    return stop ? stop() : absl::OkStatus();
  }

  // `prompt_logprobs` >= 0: DevicePrefillResult::prompt_logprobs with that many alternatives.
  absl::StatusOr<DevicePrefillResult> PrefillChunked(
      std::span<const int32_t> prompt, std::span<const kvformat::BlockView> reused,
      const engine::PrefillStopCheck& stop, int prompt_logprobs = -1) {
    const model_gpu::BlockCutSpec cut =
        model_gpu::CutSpecFor(*engine_, prompt, gpu_->numerics_tag());
    model_gpu::ChunkedPrefillResult r;
    DevicePrefillResult out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
      OSCARKV_ASSIGN_OR_RETURN(r, gpu_->PrefillChunked(prompt, cut, engine_->options().chunk_tokens,
                                                       reused, prompt_logprobs, &stop));
    }
    out.prompt_logprobs = std::move(r.prompt_logprobs);
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

  absl::StatusOr<DevicePrefillResult> PrefillOnePass(std::span<const int32_t> prompt,
                                                     const engine::PrefillStopCheck& stop) {
    const model_gpu::BlockCutSpec cut =
        model_gpu::CutSpecFor(*engine_, prompt, gpu_->numerics_tag());
    const int64_t n = static_cast<int64_t>(prompt.size());
    DevicePrefillResult out;
    model_gpu::TailRows tail;
    tail.begin = cut.reuse_boundary;
    model_gpu::PackedKv packed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      OSCARKV_RETURN_IF_ERROR(CheckStop(stop));
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

  // One-pass prefill whose pages stay on this GPU: packed into the outbox and checksummed there.
  absl::StatusOr<DevicePrefillResult> PrefillPacked(std::span<const int32_t> prompt,
                                                    const engine::PrefillStopCheck& stop) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    DevicePrefillResult out;
    PackedKvHandoff h;
    h.tokens = n;
    h.remote_descriptor = outbox_descriptor_;
    std::lock_guard<std::mutex> lock(mu_);
    OSCARKV_RETURN_IF_ERROR(CheckStop(stop));
    OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
    constexpr int64_t kId = 1;  // one prompt at a time, freed before the lock is released
    OSCARKV_RETURN_IF_ERROR(gpu_->AddSequence(kId, prompt, n, nullptr, &out.last_logits));
    const auto t0 = std::chrono::steady_clock::now();
    h.bytes = static_cast<uint64_t>(gpu_->PackedLayout(n).bytes());
    const uint64_t entry = next_entry_++;
    const std::optional<uint64_t> at = ring_.Place(
        entry, h.bytes, absl::Now() + absl::Seconds(options_.outbox_ttl_seconds));
    absl::Status st;
    if (!at.has_value()) {
      st = absl::ResourceExhaustedError(absl::StrCat(
          "the prompt's packed KV (", h.bytes, " bytes) does not fit the GPU outbox (",
          options_.outbox_bytes, " bytes; --outbox_capacity_bytes)"));
    } else {
      h.offset = *at;
      std::byte* dst = outbox_.as<std::byte>() + h.offset;
      st = gpu_->PackSequence(kId, std::span<std::byte>(dst, h.bytes));
      if (st.ok()) {
        st = CudaStatus(kernels::ByteChecksumCuda(dst, h.bytes, checksum_scratch_.as<uint64_t>(),
                                                  nullptr, &h.checksum),
                        "checksumming the packed KV");
      }
    }
    gpu_->RemoveSequence(kId);
    OSCARKV_RETURN_IF_ERROR(st);
    h.pack_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.packed = std::move(h);
    out.computed_tokens = n;
    backend_->ExpectPeerTraffic();  // the decode worker reads the packed KV next
    return out;
  }

  const engine::ServingEngine* engine_;
  const GpuPrefillDeviceOptions options_;
  const model_gpu::KvPageTableConfig shape_;
  std::mutex mu_;  // one prompt at a time on the GPU
  std::unique_ptr<model_gpu::GpuModel> gpu_;  // guarded by mu_
  model_gpu::DeviceBuffer staging_;            // guarded by mu_
  transfer::TransferBackend* backend_;
  // The packed outbox (InitOutbox; unchanged after).
  model_gpu::DeviceBuffer outbox_;
  model_gpu::DeviceBuffer checksum_scratch_;   // guarded by mu_
  transfer::MemoryHandle outbox_handle_ = 0;
  std::string outbox_descriptor_;
  bool outbox_registered_ = false;
  OutboxRing ring_;                            // guarded by mu_
  uint64_t next_entry_ = 1;                    // guarded by mu_
};

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillDevice>> NewGpuPrefillDevice(
    const engine::ServingEngine* engine, const GpuPrefillDeviceOptions& options,
    transfer::TransferBackend* backend) {
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
  auto device =
      std::make_unique<GpuPrefillDevice>(engine, options, shape, std::move(gpu), backend);
  OSCARKV_RETURN_IF_ERROR(device->InitOutbox());
  return device;
}

}  // namespace oscarkv::prefill
