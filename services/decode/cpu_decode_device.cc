// The CPU decode device: sequences are model::Sequence over the codec's three-tier cache, rebuilt
// from blocks by ServingEngine::SequenceFromBlocks and stepped by ServingEngine::DecodeStep.
#include <atomic>
#include <utility>

#include "lib/base/status_macros.h"
#include "services/decode/decode_device.h"

namespace oscarkv::decode {
namespace {

// Its length is counted apart from the model::Sequence, which the batcher's thread appends to,
// so that the metrics read it (and the bytes, a function of the length) from any thread.
class CpuHeldSequence final : public HeldSequence {
 public:
  CpuHeldSequence(const engine::ServingEngine* engine, std::unique_ptr<model::Sequence> seq,
                  int64_t max_new_tokens)
      : engine_(engine),
        seq_(std::move(seq)),
        length_(seq_->length()),
        max_length_(seq_->length() + max_new_tokens) {}
  int64_t length() const override { return length_.load(); }
  int64_t kv_bytes() const override { return engine_->KvBytesAt(length_.load()); }
  int64_t reserved_kv_bytes() const override { return engine_->KvBytesAt(max_length_); }
  int64_t remaining_tokens() const override { return max_length_ - length_.load(); }
  model::Sequence* sequence() { return seq_.get(); }
  void Appended() { length_.store(seq_->length()); }

 private:
  const engine::ServingEngine* engine_;
  std::unique_ptr<model::Sequence> seq_;
  std::atomic<int64_t> length_;
  const int64_t max_length_;
};

class CpuDecodeDevice final : public DecodeDevice {
 public:
  explicit CpuDecodeDevice(const engine::ServingEngine* engine) : engine_(engine) {}
  std::string name() const override { return "cpu"; }

  absl::StatusOr<std::unique_ptr<HeldSequence>> Build(std::span<const kvformat::BlockView> blocks,
                                                      int64_t max_new_tokens) override {
    OSCARKV_ASSIGN_OR_RETURN(std::unique_ptr<model::Sequence> seq,
                             engine_->SequenceFromBlocks(blocks));
    return std::make_unique<CpuHeldSequence>(engine_, std::move(seq), max_new_tokens);
  }

  // The logits are on the host already: the batcher takes the argmax itself.
  absl::Status Step(std::span<HeldSequence* const> seqs, std::span<const int32_t> tokens,
                    std::vector<float>* logits, std::vector<int32_t>* argmax) override {
    if (argmax != nullptr) argmax->clear();
    std::vector<model::Sequence*> cpu(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      cpu[i] = static_cast<CpuHeldSequence*>(seqs[i])->sequence();
    }
    absl::Status s = engine_->DecodeStep(cpu, tokens, logits);
    for (HeldSequence* seq : seqs) static_cast<CpuHeldSequence*>(seq)->Appended();
    return s;
  }

 private:
  const engine::ServingEngine* engine_;
};

}  // namespace

std::unique_ptr<DecodeDevice> NewCpuDecodeDevice(const engine::ServingEngine* engine) {
  return std::make_unique<CpuDecodeDevice>(engine);
}

}  // namespace oscarkv::decode
