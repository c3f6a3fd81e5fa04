// Both ways a prompt's blocks reach the decode worker, over the in-process transfer backend with
// real gRPC services (one PrefillServer, one DecodeServer, one model):
//   pull: Prefill → published_blocks (outbox) → StartSequence(descriptors) → Generate;
//   push: StartSequence(prompt_tokens) → block_locations → Prefill(decode_target) → Generate.
// Both must stream exactly the tokens of a greedy ServingEngine run in this process. A packed GPU
// handoff (PrefillRequest.offer_packed_kv) falls back to blocks on these CPU workers.
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "lib/rpc/channel_factory.h"
#include "lib/transfer/local/local_backend.h"
#include "oscarkv/decode/v1/decode.grpc.pb.h"
#include "oscarkv/prefill/v1/prefill.grpc.pb.h"
#include "services/decode/decode_server.h"
#include "services/prefill/prefill_server.h"

namespace oscarkv::e2e {
namespace {

namespace pv1 = ::oscarkv::prefill::v1;
namespace dv1 = ::oscarkv::decode::v1;

// Generate on `stub`: first, then every streamed token into *out; the stream's status.
grpc::Status GenerateOn(dv1::DecodeService::Stub& stub, uint64_t seq, uint32_t first,
                        uint32_t max_new_tokens, std::vector<uint32_t>* out) {
  dv1::GenerateRequest g;
  g.set_sequence_id(seq);
  g.set_first_token(first);
  g.set_max_new_tokens(max_new_tokens);
  auto c = rpc::MakeContext(std::chrono::seconds(120));
  auto reader = stub.Generate(c.get(), g);
  out->assign({first});
  dv1::GenerateResponse msg;
  while (reader->Read(&msg)) out->insert(out->end(), msg.token_ids().begin(), msg.token_ids().end());
  return reader->Finish();
}

TEST(PushPull, BothTransferModesStreamTheReferenceTokens) {
  if (!model::DefaultModelAvailable()) GTEST_SKIP() << "default model not installed";
  std::ifstream in(std::string(OSCARKV_SOURCE_DIR) + "/data/text/austen/persuasion.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() < 20000) GTEST_SKIP() << "data/text/austen absent";
  auto m = model::Model::Load(*model::ResolveModelPath("default"));
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string calib = decode::ResolveCalibrationPath("");
  const std::string codec = calib.empty() ? "oscar-hadamard" : "oscar";
  auto engine = decode::LoadServingEngine(m->get(), codec, calib, 256);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<int32_t> prompt = (*m)->tokenizer().Encode(ss.str().substr(10000, 3500), true);
  prompt.resize(600);  // sink, history up to the reuse boundary, BF16 tail (partial last block)
  const int max_new = 8;

  // Reference: greedy through the engine.
  std::vector<uint32_t> ref;
  {
    auto r = (*engine)->Prefill(prompt);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<float> logits = r->last_logits;
    model::Sequence* s = r->sequence.get();
    for (int i = 0; i <= max_new; ++i) {
      int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      ref.push_back(t);
      ASSERT_TRUE((*engine)->DecodeStep(std::span(&s, 1), std::span(&t, 1), &logits).ok());
    }
  }

  auto pb = transfer::LocalBackend::Create();
  auto db = transfer::LocalBackend::Create();
  prefill::PrefillConfig pc;
  pc.grpc_address = "127.0.0.1:0";
  pc.metrics_port = -1;
  pc.transfer_backend = "local";
  pc.codec = codec;
  auto pf = prefill::PrefillServer::Create(pc, {.backend = pb->get(), .engine = engine->get()});
  ASSERT_TRUE(pf.ok()) << pf.status();
  decode::DecodeConfig dc;
  dc.grpc_address = "127.0.0.1:0";
  dc.metrics_port = -1;
  dc.transfer_backend = "local";
  dc.codec = codec;
  auto ds = decode::DecodeServer::Create(dc, {.backend = db->get(), .engine = engine->get()});
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto prefill = pv1::PrefillService::NewStub(rpc::MakeChannel((*pf)->grpc_dial_address()));
  auto decode = dv1::DecodeService::NewStub(rpc::MakeChannel((*ds)->grpc_dial_address()));
  auto ctx = [] { return rpc::MakeContext(std::chrono::seconds(120)); };

  auto generate = [&](uint64_t seq, uint32_t first) {
    std::vector<uint32_t> out;
    EXPECT_TRUE(GenerateOn(*decode, seq, first, max_new, &out).ok());
    return out;
  };
  pv1::PrefillRequest preq;
  preq.set_request_id("r1");
  preq.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  preq.set_codec(codec);

  // Pull.
  {
    pv1::PrefillResponse presp;
    ASSERT_TRUE(prefill->Prefill(ctx().get(), preq, &presp).ok());
    EXPECT_EQ(presp.published_blocks_size(), (600 + 63) / 64);
    dv1::StartSequenceRequest s;
    s.set_codec(codec);
    s.set_prompt_tokens(prompt.size());
    *s.mutable_prompt_blocks() = presp.published_blocks();
    dv1::StartSequenceResponse sr;
    auto st = decode->StartSequence(ctx().get(), s, &sr);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(generate(sr.sequence_id(), presp.first_token()), ref);
  }
  // Push.
  {
    dv1::StartSequenceRequest s;
    s.set_codec(codec);
    s.set_prompt_tokens(prompt.size());
    dv1::StartSequenceResponse sr;
    ASSERT_TRUE(decode->StartSequence(ctx().get(), s, &sr).ok());
    ASSERT_EQ(sr.block_locations_size(), (600 + 63) / 64);
    pv1::PrefillRequest push = preq;
    *push.mutable_decode_target()->mutable_block_locations() = sr.block_locations();
    push.mutable_decode_target()->set_sequence_id(sr.sequence_id());
    pv1::PrefillResponse presp;
    auto st = prefill->Prefill(ctx().get(), push, &presp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(generate(sr.sequence_id(), presp.first_token()), ref);
    dv1::EndTurnRequest e;
    e.set_sequence_id(sr.sequence_id());
    dv1::EndTurnResponse er;
    ASSERT_TRUE(decode->EndTurn(ctx().get(), e, &er).ok());
    EXPECT_GT(er.released_bytes(), 0u);
  }
  // A packed GPU handoff offered to a CPU prefill worker: it answers with blocks as usual (and
  // registered as not offering one); a CPU decode worker refuses packed KV with the reason.
  {
    pv1::PrefillRequest offer = preq;
    offer.set_offer_packed_kv(true);
    pv1::PrefillResponse presp;
    ASSERT_TRUE(prefill->Prefill(ctx().get(), offer, &presp).ok());
    EXPECT_FALSE(presp.has_packed_kv());
    EXPECT_EQ(presp.published_blocks_size(), (600 + 63) / 64);
    dv1::StartSequenceRequest s;
    s.set_codec(codec);
    s.set_prompt_tokens(prompt.size());
    s.mutable_packed_kv()->set_tokens(prompt.size());
    s.mutable_packed_kv()->set_bytes(1 << 20);
    s.mutable_packed_kv()->mutable_location()->set_endpoint_address("somewhere");
    dv1::StartSequenceResponse sr;
    // Another model's KV (the descriptor's fingerprints, here unset) is refused first...
    grpc::Status st = decode->StartSequence(ctx().get(), s, &sr);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.error_message().find("another model"), std::string::npos) << st.error_message();
    // ... and this model's, by a worker whose device cannot take packed KV.
    s.mutable_packed_kv()->set_model_fingerprint((*engine)->model_fingerprint());
    s.mutable_packed_kv()->set_calib_fingerprint((*engine)->calibration_fingerprint());
    st = decode->StartSequence(ctx().get(), s, &sr);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.error_message().find("cannot take packed GPU KV"), std::string::npos)
        << st.error_message();
  }
  // Push reservations live --receive_ttl_seconds, not --idle_ttl_seconds (a long CPU prefill
  // outlasts the idle TTL): one reserved on a worker whose idle TTL is 0.5 s still takes the
  // blocks after 2.5 s (the worker sweeps every second); on a worker whose receive TTL is
  // 0.5 s the push fails, and the error names the flag.
  auto reserve_wait_push = [&](double idle_ttl, double receive_ttl, grpc::Status* push_status,
                               std::vector<uint32_t>* tokens) {
    auto backend = transfer::LocalBackend::Create();
    decode::DecodeConfig c = dc;
    c.idle_ttl_seconds = idle_ttl;
    c.receive_ttl_seconds = receive_ttl;
    auto server = decode::DecodeServer::Create(c, {.backend = backend->get(), .engine = engine->get()});
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = dv1::DecodeService::NewStub(rpc::MakeChannel((*server)->grpc_dial_address()));
    dv1::StartSequenceRequest s;
    s.set_codec(codec);
    s.set_prompt_tokens(prompt.size());
    dv1::StartSequenceResponse sr;
    ASSERT_TRUE(stub->StartSequence(ctx().get(), s, &sr).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    pv1::PrefillRequest push = preq;
    *push.mutable_decode_target()->mutable_block_locations() = sr.block_locations();
    push.mutable_decode_target()->set_sequence_id(sr.sequence_id());
    pv1::PrefillResponse presp;
    *push_status = prefill->Prefill(ctx().get(), push, &presp);
    if (push_status->ok()) {
      EXPECT_TRUE(GenerateOn(*stub, sr.sequence_id(), presp.first_token(), max_new, tokens).ok());
    }
    (*server)->Shutdown();
  };
  {
    grpc::Status st;
    std::vector<uint32_t> tokens;
    reserve_wait_push(/*idle_ttl=*/0.5, /*receive_ttl=*/600, &st, &tokens);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(tokens, ref);
  }
  {
    grpc::Status st;
    std::vector<uint32_t> tokens;
    reserve_wait_push(/*idle_ttl=*/60, /*receive_ttl=*/0.5, &st, &tokens);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.error_message().find("--receive_ttl_seconds"), std::string::npos)
        << st.error_message();
  }
  // A push whose slots are too few is refused.
  {
    pv1::PrefillRequest bad = preq;
    bad.mutable_decode_target()->add_block_locations();
    pv1::PrefillResponse presp;
    EXPECT_EQ(prefill->Prefill(ctx().get(), bad, &presp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A sequence is admitted by its bytes at prompt + max_new_tokens. On a worker with room for one
  // prompt that may grow by 2000 tokens and half a prompt more, a second such sequence is refused
  // though the two prompts alone would fit (the pool counted only the bytes held, so generation
  // could grow past --kv_capacity_bytes); a Generate beyond the room reserved is refused; a short
  // one streams the reference tokens; releasing the first sequence makes room.
  {
    const int64_t grow = 2000;
    const int64_t held = (*engine)->KvBytesAt(static_cast<int64_t>(prompt.size()));
    const int64_t grown = (*engine)->KvBytesAt(static_cast<int64_t>(prompt.size()) + grow);
    auto backend = transfer::LocalBackend::Create();
    decode::DecodeConfig c = dc;
    c.kv_capacity_bytes = grown + held / 2;
    ASSERT_GT(c.kv_capacity_bytes, 2 * held);
    auto server =
        decode::DecodeServer::Create(c, {.backend = backend->get(), .engine = engine->get()});
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = dv1::DecodeService::NewStub(rpc::MakeChannel((*server)->grpc_dial_address()));
    pv1::PrefillResponse presp;
    ASSERT_TRUE(prefill->Prefill(ctx().get(), preq, &presp).ok());
    auto start = [&](dv1::StartSequenceResponse* sr) {
      dv1::StartSequenceRequest s;
      s.set_codec(codec);
      s.set_prompt_tokens(prompt.size());
      s.set_max_new_tokens(grow);
      *s.mutable_prompt_blocks() = presp.published_blocks();
      return stub->StartSequence(ctx().get(), s, sr);
    };
    auto generate_on = [&](uint64_t seq, uint32_t max_new_tokens, std::vector<uint32_t>* out) {
      return GenerateOn(*stub, seq, presp.first_token(), max_new_tokens, out);
    };
    dv1::StartSequenceResponse a, b;
    ASSERT_TRUE(start(&a).ok());
    grpc::Status st = start(&b);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_NE(st.error_message().find("--kv_capacity_bytes"), std::string::npos)
        << st.error_message();
    std::vector<uint32_t> tokens;
    st = generate_on(a.sequence_id(), grow + 1, &tokens);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("exceeds the room reserved"), std::string::npos)
        << st.error_message();
    st = generate_on(a.sequence_id(), max_new, &tokens);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(tokens, ref);
    dv1::EndTurnRequest e;
    e.set_sequence_id(a.sequence_id());
    dv1::EndTurnResponse er;
    ASSERT_TRUE(stub->EndTurn(ctx().get(), e, &er).ok());
    EXPECT_EQ(static_cast<int64_t>(er.released_bytes()),
              (*engine)->KvBytesAt(static_cast<int64_t>(prompt.size()) + max_new));
    st = start(&b);
    EXPECT_TRUE(st.ok()) << st.error_message();
    // A client that leaves mid-generation: the EndTurn right after the cancel holds although
    // the sequence is in the batch for a step more, and its room comes back as it leaves.
    {
      dv1::GenerateRequest g;
      g.set_sequence_id(b.sequence_id());
      g.set_first_token(presp.first_token());
      g.set_max_new_tokens(grow);
      auto gc = ctx();
      auto reader = stub->Generate(gc.get(), g);
      dv1::GenerateResponse msg;
      ASSERT_TRUE(reader->Read(&msg));
      gc->TryCancel();
      dv1::EndTurnRequest end;
      end.set_sequence_id(b.sequence_id());
      st = stub->EndTurn(ctx().get(), end, &er);
      EXPECT_TRUE(st.ok()) << st.error_message();
      reader->Finish();
    }
    dv1::StartSequenceResponse third;
    for (int i = 0; i < 100 && !(st = start(&third)).ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(st.ok()) << st.error_message();
    (*server)->Shutdown();
  }
  (*pf)->Shutdown();
  (*ds)->Shutdown();
}

}  // namespace
}  // namespace oscarkv::e2e
