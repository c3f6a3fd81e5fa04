// The CPU decode device: sequences are model::Sequence over the codec's three-tier cache, rebuilt
// from blocks by ServingEngine::SequenceFromBlocks and stepped by ServingEngine::DecodeStep.
#include <utility>

#include "lib/base/status_macros.h"
#include "services/decode/decode_device.h"

namespace oscarkv::decode {
namespace {

class CpuHeldSequence final : public HeldSequence {
 public:
  CpuHeldSequence(const engine::ServingEngine* engine, std::unique_ptr<model::Sequence> seq)
      : engine_(engine), seq_(std::move(seq)) {}
  int64_t length() const override { return seq_->length(); }
  int64_t kv_bytes() const override { return engine_->SequenceKvBytes(*seq_); }
  model::Sequence* sequence() { return seq_.get(); }

 private:
  const engine::ServingEngine* engine_;
  std::unique_ptr<model::Sequence> seq_;
};

class CpuDecodeDevice final : public DecodeDevice {
 public:
  explicit CpuDecodeDevice(const engine::ServingEngine* engine) : engine_(engine) {}
  std::string name() const override { return "cpu"; }

  absl::StatusOr<std::unique_ptr<HeldSequence>> Build(std::span<const kvformat::BlockView> blocks,
                                                      int64_t /*max_new_tokens*/) override {
    OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<model::Sequence> seq,
                             engine_->SequenceFromBlocks(blocks));
    return std::make_unique<CpuHeldSequence>(engine_, std::move(seq));
  }

  // The logits are on the host already: the batcher takes the argmax itself.
  absl::Status Step(std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
                    std::vector<float>* logits, std::vector<int32_t>* argmax) override {
    if (argmax != nullptr) argmax->clear();
    std::vector<model::Sequence*> cpu(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      cpu[i] = static_cast<CpuHeldSequence*>(seqs[i])->sequence();
    }
    return engine_->DecodeStep(cpu, tokens, logits);
  }

 private:
  const engine::ServingEngine* engine_;
};

}  // namespace

std::unique_ptr<DecodeDevice> NewCpuDecodeDevice(const engine::ServingEngine* engine) {
  return std::make_unique<CpuDecodeDevice>(engine);
}

}  // namespace oscarkv::decode
