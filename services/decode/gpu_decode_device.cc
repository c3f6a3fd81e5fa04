#include "services/decode/gpu_decode_device.h"

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/checksum/byte_checksum_cuda.h"
#include "lib/base/log.h"
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
  int64_t reserved_kv_bytes() const override;
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
                  model_gpu::KvPageTableConfig shape, std::unique_ptr<model_gpu::GpuModel> gpu,
                  transfer::TransferBackend* backend)
      : engine_(engine),
        options_(options),
        shape_(shape),
        gpu_(std::move(gpu)),
        backend_(backend),
        takes_packed_(options.packed_handoff && backend->capabilities().gpu_memory) {}

  ~GpuDecodeDevice() override {
    std::lock_guard<std::mutex> lock(recv_mu_);
    DeregisterReceiveBuffer();
    if (recv_stream_ != nullptr) cudaStreamDestroy(recv_stream_);
  }

  std::string name() const override { return absl::StrCat("cuda:", options_.device); }
  bool takes_packed_kv() const override { return takes_packed_; }

  absl::StatusOr<std::unique_ptr<HeldSequence>> BuildFromPacked(
      const PackedKvSource& source, int64_t max_new_tokens, PackedKvArrival* arrival) override {
    if (!takes_packed_) return DecodeDevice::BuildFromPacked(source, max_new_tokens, arrival);
    if (source.codec != static_cast<uint32_t>(engine_->codec().id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("packed KV of codec id ", source.codec, " for a worker serving ",
                       std::string(engine_->codec().name)));
    }
    if (source.tokens <= 0 || source.peer_address.empty() || source.remote_descriptor.empty()) {
      return absl::InvalidArgumentError("packed KV source without tokens or location");
    }
    const uint64_t want = static_cast<uint64_t>(gpu_->PackedLayout(source.tokens).bytes());
    if (source.bytes != want) {
      return absl::FailedPreconditionError(
          absl::StrCat("packed KV of ", source.tokens, " tokens is ", want,
                       " bytes for this model and codec; the descriptor says ", source.bytes));
    }
    // One receive at a time into the buffer; decode steps go on meanwhile (they take mu_ only).
    std::lock_guard<std::mutex> recv_lock(recv_mu_);
    OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
    OSCARKV_RETURN_IF_ERROR(EnsureReceiveBuffer(source.bytes));
    auto t0 = std::chrono::steady_clock::now();
    transfer::TransferBatch batch;
    batch.peer_address = source.peer_address;
    batch.ops.push_back({recv_handle_, 0, source.remote_descriptor, source.offset, source.bytes,
                         transfer::Direction::kGet});
    OSCARKV_RETURN_IF_ERROR(transfer::TransferAndWait(*backend_, batch));
    auto t1 = std::chrono::steady_clock::now();
    uint64_t checksum = 0;
    OSCARKV_RETURN_IF_ERROR(CudaStatus(
        kernels::ByteChecksumCuda(recv_.get(), source.bytes, checksum_scratch_.as<uint64_t>(),
                                  recv_stream_, &checksum),
        "checksumming the received KV"));
    auto t2 = std::chrono::steady_clock::now();
    if (checksum != source.checksum) {
      return absl::DataLossError(absl::StrCat(
          "packed KV checksum mismatch (", source.bytes, " bytes from the prefill GPU; the "
          "holder may have reused its outbox): not used"));
    }
    if (arrival != nullptr) {
      arrival->transfer_seconds = std::chrono::duration<double>(t1 - t0).count();
      arrival->verify_seconds = std::chrono::duration<double>(t2 - t1).count();
    }
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t id = next_id_++;
    OSCARKV_RETURN_IF_ERROR(gpu_->AddPackedSequence(
        id, source.tokens, source.tokens + max_new_tokens,
        std::span<const std::byte>(recv_.as<std::byte>(), source.bytes)));
    return std::make_unique<GpuHeldSequence>(this, id, source.tokens,
                                             source.tokens + max_new_tokens);
  }

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

  // The GPU has every row's argmax after a step anyway; an all-greedy step copies only those.
  absl::Status Step(std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
                    std::vector<float>* logits, std::vector<int32_t>* argmax) override {
    std::vector<int64_t> ids(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      ids[i] = static_cast<GpuHeldSequence*>(seqs[i])->id();
    }
    std::lock_guard<std::mutex> lock(mu_);
    OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
    if (argmax != nullptr) {
      logits->clear();
      OSCARKV_RETURN_IF_ERROR(gpu_->DecodeStep(ids, tokens, argmax, nullptr));
    } else {
      OSCARKV_RETURN_IF_ERROR(gpu_->DecodeStep(ids, tokens, &greedy_, logits));
    }
    for (HeldSequence* s : seqs) static_cast<GpuHeldSequence*>(s)->Appended();
    return absl::OkStatus();
  }

  // Bytes of the pages a sequence of `length` tokens holds (a function of the length alone).
  int64_t KvBytes(int64_t length) const {
    const model_gpu::PageCount p = model_gpu::PagesHeld(shape_, length);
    return p.bf16 * model_gpu::Bf16PageBytes(shape_) + p.int2 * model_gpu::Int2PageBytes(shape_);
  }

  // Grows the registered receive buffer to at least `bytes` (recv_mu_ held, device set).
  absl::Status EnsureReceiveBuffer(uint64_t bytes) {
    if (recv_registered_ && recv_.bytes() >= bytes) return absl::OkStatus();
    DeregisterReceiveBuffer();
    if (recv_stream_ == nullptr) {
      OSCARKV_RETURN_IF_ERROR(CudaStatus(
          cudaStreamCreateWithFlags(&recv_stream_, cudaStreamNonBlocking), "receive stream"));
      OSCARKV_RETURN_IF_ERROR(checksum_scratch_.Allocate(sizeof(uint64_t), "checksum scratch"));
    }
    OSCARKV_RETURN_IF_ERROR(recv_.Allocate(bytes, "the packed KV receive buffer"));
    OSCARKV_ASSIGN_OR_RETURN(
        transfer::RegisteredMemory reg,
        backend_->RegisterMemory(std::span<std::byte>(recv_.as<std::byte>(), recv_.bytes())));
    recv_handle_ = reg.handle;
    recv_registered_ = true;
    return absl::OkStatus();
  }
  void DeregisterReceiveBuffer() {
    if (!recv_registered_) return;
    if (absl::Status s = backend_->DeregisterMemory(recv_handle_); !s.ok()) {
      LOG(WARNING) << "receive buffer deregistration failed: " << s;
    }
    recv_registered_ = false;
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
  transfer::TransferBackend* backend_;
  const bool takes_packed_;
  std::mutex recv_mu_;  // one packed receive at a time
  model_gpu::DeviceBuffer recv_;                      // guarded by recv_mu_
  model_gpu::DeviceBuffer checksum_scratch_;          // guarded by recv_mu_
  transfer::MemoryHandle recv_handle_ = 0;            // guarded by recv_mu_
  bool recv_registered_ = false;                      // guarded by recv_mu_
  cudaStream_t recv_stream_ = nullptr;                // guarded by recv_mu_
};

GpuHeldSequence::~GpuHeldSequence() { device_->Remove(id_); }

int64_t GpuHeldSequence::kv_bytes() const { return device_->KvBytes(length_.load()); }
int64_t GpuHeldSequence::reserved_kv_bytes() const { return device_->KvBytes(max_length_); }

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeDevice>> NewGpuDecodeDevice(
    const engine::ServingEngine* engine, const GpuDecodeDeviceOptions& options,
    transfer::TransferBackend* backend) {
  OSCARKV_ASSIGN_OR_RETURN(model_gpu::KvPageTableConfig shape,
                           model_gpu::GpuPageShape(engine->model().config(), engine->codec()));
  model_gpu::GpuModelOptions o;
  o.device = options.device;
  o.max_batch = options.max_batch;
  o.max_prompt_tokens = options.max_batch;  // never prefills: scratch for decode rows only
  o.kv_budget_bytes = options.kv_budget_bytes;
  OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<model_gpu::GpuModel> gpu,
                           model_gpu::GpuModel::ForEngine(*engine, o));
  return std::make_unique<GpuDecodeDevice>(engine, options, shape, std::move(gpu), backend);
}

}  // namespace oscarkv::decode
