// Bytes on the wire per token, INT2 vs BF16 blocks (issue 6): a prompt's blocks, as the prefill
// worker makes them (ServingEngine::Prefill), are moved between two UCX backends exactly as the
// decode worker fetches them (KvFetcher: one registered buffer, gets, checks on arrival). The
// transfer layer's counters must equal the format's sizes (128-byte header + PayloadBytes per
// block), and the history blocks' bits per element must be the format's (2-bit codes plus
// per-group fp16 scale/min), against 16 for BF16.
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "lib/engine/serving_engine.h"
#include "lib/kvformat/int2_block.h"
#include "lib/model/model.h"
#include "lib/transfer/ucx/ucx_backend.h"
#include "services/decode/decode_server.h"
#include "services/decode/kv_fetcher.h"

namespace oscarkv::e2e {
namespace {

struct WireResult {
  uint64_t wire_bytes = 0;       // transfer counters (bytes_got at the fetcher)
  uint64_t format_bytes = 0;     // sum of 128 + PayloadBytes over blocks
  uint64_t history_payload = 0;  // payload bytes of quantised history blocks
  uint64_t history_elements = 0; // K+V elements in them
  int64_t tokens = 0;
};

WireResult Measure(const model::Model& m, const std::string& codec, const std::string& calib,
                   const std::vector<int32_t>& prompt) {
  WireResult w;
  auto engine = decode::LoadServingEngine(&m, codec, calib, 256);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return w;
  auto r = (*engine)->Prefill(prompt);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return w;
  // The holder (prefill outbox) registers all blocks in one buffer.
  std::vector<std::byte> outbox;
  std::vector<decode::BlockSource> sources;
  auto holder = transfer::UcxBackend::Create();
  auto fetcher_backend = transfer::UcxBackend::Create();
  EXPECT_TRUE(holder.ok() && fetcher_backend.ok());
  for (const auto& b : r->blocks) outbox.insert(outbox.end(), b.bytes.begin(), b.bytes.end());
  auto reg = (*holder)->RegisterMemory(std::span<std::byte>(outbox));
  EXPECT_TRUE(reg.ok());
  uint64_t off = 0;
  const auto& c = m.config();
  for (const auto& b : r->blocks) {
    auto h = kvformat::ParseBlockHeader(b.bytes);
    EXPECT_TRUE(h.ok());
    sources.push_back({(*holder)->EndpointAddress(), reg->remote_descriptor, off, b.bytes.size(),
                       h->key, h->payload_checksum});
    off += b.bytes.size();
    const auto kind = static_cast<kvformat::BlockKind>(h->block_kind);
    const size_t payload = kvformat::PayloadBytes(static_cast<kvformat::CodecId>(h->codec), kind,
                                                  c.num_layers, c.num_kv_heads, c.head_dim,
                                                  h->token_count);
    EXPECT_EQ(h->payload_bytes, payload);
    w.format_bytes += kvformat::kBlockHeaderBytes + payload;
    if (kind == kvformat::BlockKind::kQuantized) {
      w.history_payload += payload;
      w.history_elements += uint64_t{2} * h->token_count * c.num_layers * c.num_kv_heads * c.head_dim;
    }
  }
  decode::KvFetcher fetcher(fetcher_backend->get());
  kvformat::BlockExpectations expect;
  expect.model_fingerprint = (*engine)->model_fingerprint();
  auto fetched = fetcher.Fetch(sources, expect);
  EXPECT_TRUE(fetched.ok()) << fetched.status();
  w.wire_bytes = (*fetcher_backend)->counters().bytes_got;
  w.tokens = static_cast<int64_t>(prompt.size());
  // The fetched blocks rebuild a sequence of the prompt's length.
  if (fetched.ok()) {
    auto seq = (*engine)->SequenceFromBlocks(fetched->views);
    EXPECT_TRUE(seq.ok()) << seq.status();
    if (seq.ok()) {
      EXPECT_EQ((*seq)->length(), w.tokens);
    }
  }
  EXPECT_TRUE((*holder)->DeregisterMemory(reg->handle).ok());
  return w;
}

TEST(WireBytes, Int2BlocksMoveTheFormatsBytesPerToken) {
  if (!model::DefaultModelAvailable()) GTEST_SKIP() << "default model not installed";
  std::ifstream in(std::string(OSCARKV_SOURCE_DIR) + "/data/text/austen/emma.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.size() < 8000) GTEST_SKIP() << "data/text/austen absent (run scripts/setup.sh)";
  auto path = model::ResolveModelPath("default");
  auto m = model::Model::Load(*path);
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& c = (*m)->config();
  std::vector<int32_t> prompt = (*m)->tokenizer().Encode(text.substr(5000, 4000), true);
  prompt.resize(std::min<size_t>(prompt.size(), 704));  // 11 blocks: sink, 6 history, 4 tail
  ASSERT_EQ(prompt.size(), 704u);

  std::string calib = decode::ResolveCalibrationPath("");
  const std::string int2 = calib.empty() ? "oscar-hadamard" : "oscar";
  const WireResult q = Measure(**m, int2, calib, prompt);
  const WireResult b = Measure(**m, "bf16", "", prompt);

  // Counters equal the format, for both.
  EXPECT_EQ(q.wire_bytes, q.format_bytes);
  EXPECT_EQ(b.wire_bytes, b.format_bytes);
  // History blocks: bits per element from the format (2-bit codes + fp16 params per group).
  ASSERT_GT(q.history_elements, 0u);
  const double int2_bits = 8.0 * q.history_payload / q.history_elements;
  EXPECT_GT(int2_bits, 2.0);
  EXPECT_LT(int2_bits, 3.0);
  // BF16 blocks carry 16 bits per element (plus 128-byte headers).
  const uint64_t bf16_elements = uint64_t{2} * b.tokens * c.num_layers * c.num_kv_heads * c.head_dim;
  const uint64_t blocks = (b.tokens + 63) / 64;
  EXPECT_EQ(b.wire_bytes, bf16_elements * 2 + blocks * kvformat::kBlockHeaderBytes);
  std::printf(
      "[measure] wire bytes per token over UCX (%lld-token prompt, %d layers x %d KV heads x "
      "%d dims): %s %.1f B/token (history blocks %.3f bits/element), bf16 %.1f B/token (16 "
      "bits/element); ratio %.3f\n",
      static_cast<long long>(q.tokens), c.num_layers, c.num_kv_heads, c.head_dim, int2.c_str(),
      double(q.wire_bytes) / q.tokens, int2_bits, double(b.wire_bytes) / b.tokens,
      double(q.wire_bytes) / b.wire_bytes);
}

}  // namespace
}  // namespace oscarkv::e2e
