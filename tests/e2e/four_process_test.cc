// The distributed service as four processes on loopback, KV blocks over UCX (issue 6):
//   the router (`oscarkv serve --router_only`: OpenAI API + worker registry), then
//   oscarkv_kvstore, oscarkv_prefill and oscarkv_decode, which register with it
//   (--router_address) and are placed on per request (registry mode, no static addresses).
// (a) a greedy completion through the router's OpenAI API equals, token for token, the same
//     prompt run in this process through lib/engine's ServingEngine with the same codec, and
//     the text `oscarkv generate --codec` prints;
// (b) a second request sharing a long prefix (> chunk 256 + recent 256) hits the kvstore: the
//     prefill reuses stored blocks (its counters and the kvstore's hit counters say so) and
//     the answer still equals the no-reuse reference.
#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"
#include "lib/engine/sampler.h"
#include "lib/engine/serving_engine.h"
#include "lib/model/model.h"
#include "lib/quant/codec_spec.h"
#include "nlohmann/json.hpp"
#include "services/decode/decode_server.h"
#include "tests/e2e/process.h"
#include "tests/testing/hang_up_client.h"

namespace oscarkv::e2e {
namespace {

using nlohmann::json;

// The KV codec under test: oscar when its calibration file is present, else oscar-hadamard (the
// uncalibrated OSCAR variant: Hadamard rotation, clip, sink/recent), so the test runs on a
// machine before calibration exists.
std::string TestCodec(std::string* calibration) {
  *calibration = decode::ResolveCalibrationPath("");
  return calibration->empty() ? "oscar-hadamard" : "oscar";
}

std::string AustenText(size_t from, size_t chars) {
  std::ifstream in(std::string(OSCARKV_SOURCE_DIR) + "/data/text/austen/prideprejudice.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  if (all.size() < from + chars) return "";
  return all.substr(from, chars);
}

// Scrapes one sample ("name{labels} value") from a Prometheus text page; -1 when absent.
double Sample(const std::string& page, const std::string& series) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

std::string Get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get(path.c_str());
  return r && r->status == 200 ? r->body : "";
}

class FourProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!model::DefaultModelAvailable()) return;
    codec_ = TestCodec(&calibration_);
    auto path = model::ResolveModelPath("default");
    auto m = model::Model::Load(*path);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
    auto e = decode::LoadServingEngine(model_, codec_, calibration_, 256);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = e->release();

    // The router first: workers register with it as they come up.
    std::vector<std::string> rargs = {OSCARKV_BINARY, "serve", "--router_only",
                                      "--router_grpc_address", "127.0.0.1:0",
                                      "--heartbeat_interval_s", "0.5", "--host", "127.0.0.1",
                                      "--port", "0", "--codec", codec_};
    if (!calibration_.empty()) {
      rargs.push_back("--calibration");
      rargs.push_back(calibration_);
    }
    router_ = new Process;
    auto rt = router_->Start(
        rargs, "ready at http://127.0.0.1:([0-9]+)/v1 \\(worker registry on port ([0-9]+)\\)");
    ASSERT_EQ(rt.size(), 2u) << router_->output();
    router_port_ = std::stoi(rt[0]);
    const std::string registry = "127.0.0.1:" + rt[1];
    registry_ = registry;

    const std::string ready = "serving gRPC on port ([0-9]+), metrics on port ([0-9]+)";
    kvstore_ = new Process;
    auto kv = kvstore_->Start({OSCARKV_KVSTORE_BINARY, "--grpc_address", "127.0.0.1:0",
                               "--metrics_host", "127.0.0.1", "--metrics_port", "0",
                               "--capacity_bytes", "268435456", "--drain_seconds", "1",
                               "--router_address", registry},
                              ready);
    ASSERT_EQ(kv.size(), 2u) << kvstore_->output();
    kv_metrics_ = std::stoi(kv[1]);
    const std::string kv_addr = "127.0.0.1:" + kv[0];
    std::vector<std::string> common = {"--metrics_host", "127.0.0.1", "--metrics_port", "0",
                                       "--codec", codec_, "--drain_seconds", "1",
                                       "--router_address", registry};
    if (!calibration_.empty()) {
      common.push_back("--calibration");
      common.push_back(calibration_);
    }
    common_ = common;
    kv_addr_ = kv_addr;
    std::vector<std::string> pargs = {OSCARKV_PREFILL_BINARY, "--grpc_address", "127.0.0.1:0",
                                      "--kvstore_address", kv_addr};
    pargs.insert(pargs.end(), common.begin(), common.end());
    prefill_ = new Process;
    auto pf = prefill_->Start(pargs, ready);
    ASSERT_EQ(pf.size(), 2u) << prefill_->output();
    prefill_metrics_ = std::stoi(pf[1]);
    std::vector<std::string> dargs = {OSCARKV_DECODE_BINARY, "--grpc_address", "127.0.0.1:0"};
    dargs.insert(dargs.end(), common.begin(), common.end());
    decode_ = new Process;
    auto dc = decode_->Start(dargs, ready);
    ASSERT_EQ(dc.size(), 2u) << decode_->output();
    decode_metrics_ = std::stoi(dc[1]);
    // Ready once the prefill and decode workers have registered and heartbeated.
    bool ready_router = false;
    for (int i = 0; i < 200 && !ready_router; ++i) {
      httplib::Client c("127.0.0.1", router_port_);
      auto r = c.Get("/readyz");
      ready_router = r && r->status == 200;
      if (!ready_router) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(ready_router) << router_->output();
    json models = json::parse(Get(router_port_, "/v1/models"));
    model_id_ = models["data"][0]["id"];
  }

  static void TearDownTestSuite() {
    // Workers drain (and deregister) first, then the router; each must exit cleanly on SIGTERM.
    for (Process* p : {decode_, prefill_, kvstore_, router_}) {
      if (p != nullptr) {
        EXPECT_EQ(p->Stop(), 0) << p->output();
        delete p;
      }
    }
    delete engine_;
    delete model_;
  }

  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "default model not installed";
  }

  // Greedy reference in this process: Prefill + DecodeStep, stopping at end-of-generation.
  static std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_tokens) {
    auto r = engine_->Prefill(prompt);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<int32_t> out;
    const auto& tok = model_->tokenizer();
    auto argmax = [](const std::vector<float>& l) {
      return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    };
    int32_t t = argmax(r->last_logits);
    std::vector<float> logits;
    while (static_cast<int>(out.size()) < max_tokens && !tok.IsEndOfGeneration(t)) {
      out.push_back(t);
      if (static_cast<int>(out.size()) == max_tokens) break;
      model::Sequence* s = r->sequence.get();
      EXPECT_TRUE(engine_->DecodeStep(std::span(&s, 1), std::span(&t, 1), &logits).ok());
      t = argmax(logits);
    }
    return out;
  }

  static json Complete(const std::string& prompt, int max_tokens) {
    httplib::Client c("127.0.0.1", router_port_);
    c.set_read_timeout(120, 0);
    json body = {{"model", model_id_}, {"prompt", prompt}, {"max_tokens", max_tokens},
                 {"temperature", 0}};
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r) << "no response";
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }

  static inline model::Model* model_ = nullptr;
  static inline engine::ServingEngine* engine_ = nullptr;
  static inline std::string codec_, calibration_, model_id_, registry_, kv_addr_;
  static inline std::vector<std::string> common_;  // the flags every model worker gets
  static inline Process *kvstore_ = nullptr, *prefill_ = nullptr, *decode_ = nullptr,
                        *router_ = nullptr;
  static inline int kv_metrics_ = 0, prefill_metrics_ = 0, decode_metrics_ = 0, router_port_ = 0;
};

// A prefill and a decode worker killed before the registry notices (heartbeats every 0.5 s
// here) cost no request: the router places a prefill again on the other prefill worker, and
// starts the sequence on the other decode worker, instead of failing with "connection refused".
TEST_F(FourProcessTest, RequestsOnKilledWorkersArePlacedAgain) {
  const std::string ready = "serving gRPC on port ([0-9]+), metrics on port ([0-9]+)";
  std::vector<std::string> pargs = {OSCARKV_PREFILL_BINARY, "--grpc_address", "127.0.0.1:0",
                                    "--kvstore_address", kv_addr_, "--worker_id", "prefill-extra"};
  pargs.insert(pargs.end(), common_.begin(), common_.end());
  auto prefill = std::make_unique<Process>();
  ASSERT_EQ(prefill->Start(pargs, ready).size(), 2u) << prefill->output();
  std::vector<std::string> dargs = {OSCARKV_DECODE_BINARY, "--grpc_address", "127.0.0.1:0",
                                    "--worker_id", "decode-extra"};
  dargs.insert(dargs.end(), common_.begin(), common_.end());
  auto decode = std::make_unique<Process>();
  ASSERT_EQ(decode->Start(dargs, ready).size(), 2u) << decode->output();
  auto healthy = [](const std::string& role) {
    return Sample(Get(router_port_, "/metrics"),
                  "oscarkv_router_workers{role=\"" + role + "\",health=\"healthy\"}");
  };
  for (int i = 0; i < 200 && (healthy("prefill") < 2 || healthy("decode") < 2); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(healthy("prefill"), 2) << router_->output();
  ASSERT_EQ(healthy("decode"), 2) << router_->output();

  const std::string prompt = "The three primary colors are";
  const std::string expected = Complete(prompt, 6)["choices"][0]["text"];
  prefill.reset();  // SIGKILL
  decode.reset();
  // Concurrent requests spread over both pairs (the router counts what it placed), so some are
  // placed on the dead workers before the registry marks them suspect.
  std::vector<std::thread> clients;
  std::vector<std::string> texts(4);
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      const json r = Complete(prompt, 6);
      if (r.contains("choices")) texts[i] = r["choices"][0]["text"];
    });
  }
  for (std::thread& t : clients) t.join();
  for (const std::string& text : texts) EXPECT_EQ(text, expected);
  const std::string log = router_->output();
  EXPECT_NE(log.find("prefill on prefill-extra"), std::string::npos) << log;
  EXPECT_NE(log.find("; placing it again"), std::string::npos) << log;
  EXPECT_NE(log.find("; starting it on decode-"), std::string::npos) << log;
}

// A generation that its decode worker cuts off resumes on another one, and the client gets one
// whole completion: once when the worker drains past --drain_seconds (SIGTERM: the cut-off
// generation fails with UNAVAILABLE instead of gRPC's "Cancelling all calls"), once when it
// is killed. Two extra decode workers whose ids sort first take the requests (placement breaks
// ties by id). The continuation after the cut equals, token for token, this process's run of
// the same resume: the prompt and the tokens before the cut but the last prefilled, the last fed
// to the decode step; greedy once, and once sampled with a seed, where the resume must draw what
// the cut-off generation would have (each draw keyed by the seed and the token's index).
TEST_F(FourProcessTest, AGenerationCutOffByItsDecodeWorkerResumesOnAnother) {
  const std::string ready = "serving gRPC on port ([0-9]+), metrics on port ([0-9]+)";
  // A drain of 0.2 s: the generation must still be running when it ends, however fast the
  // machine (160 tokens take over a second on the CPU).
  auto start_decode = [&](const std::string& id, int* metrics_port) {
    std::vector<std::string> dargs = {OSCARKV_DECODE_BINARY, "--grpc_address", "127.0.0.1:0",
                                      "--worker_id", id};
    dargs.insert(dargs.end(), common_.begin(), common_.end());
    auto drain = std::find(dargs.begin(), dargs.end(), "--drain_seconds");
    EXPECT_NE(drain, dargs.end());
    if (drain != dargs.end()) *std::next(drain) = "0.2";
    auto p = std::make_unique<Process>();
    auto got = p->Start(dargs, ready);
    EXPECT_EQ(got.size(), 2u) << p->output();
    if (got.size() == 2) *metrics_port = std::stoi(got[1]);
    return p;
  };
  int first_metrics = 0, second_metrics = 0;
  std::unique_ptr<Process> first = start_decode("aa-decode-1", &first_metrics);
  std::unique_ptr<Process> second = start_decode("aa-decode-2", &second_metrics);
  auto healthy_decode = [] {
    return Sample(Get(router_port_, "/metrics"),
                  "oscarkv_router_workers{role=\"decode\",health=\"healthy\"}");
  };
  for (int i = 0; i < 200 && healthy_decode() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(healthy_decode(), 3) << router_->output();

  const std::string prompt = "Once upon a time, in a small village by the sea,";
  const int max_tokens = 160;
  const auto& tok = model_->tokenizer();
  const std::vector<int32_t> ids = tok.Encode(prompt, true);
  // The completion of `prompt` at `temperature` (seed 7) that has `done` so far, as a resume
  // makes it: `prompt` + done[0..n-1) prefilled, done[n-1] fed, every token of `done` counted by
  // the sampler, to max_tokens in all. With `done` empty, the uninterrupted completion.
  auto reference = [&](std::vector<int32_t> done, float temperature) {
    engine::Sampler sampler({.temperature = temperature, .seed = 7});
    std::vector<int32_t> prefix = ids;
    if (!done.empty()) prefix.insert(prefix.end(), done.begin(), done.end() - 1);
    auto r = engine_->Prefill(prefix);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return done;
    if (done.empty()) {
      done.push_back(sampler.Sample(r->last_logits));
    } else {
      for (int32_t t : done) sampler.Observe(t);
    }
    int32_t t = done.back();
    std::vector<float> logits;
    while (static_cast<int>(done.size()) < max_tokens) {
      model::Sequence* seq = r->sequence.get();
      EXPECT_TRUE(engine_->DecodeStep(std::span(&seq, 1), std::span(&t, 1), &logits).ok());
      t = sampler.Sample(logits);
      done.push_back(t);
    }
    return done;
  };
  // Runs one completion (end-of-generation ignored: a fixed length) and cuts its decode worker
  // off with `cut` once that has generated a few tokens.
  auto run_and_cut = [&](int metrics_port, float temperature, const std::function<void()>& cut) {
    json result;
    auto generated = [&] {
      return std::max(
          0.0, Sample(Get(metrics_port, "/metrics"), "oscarkv_decode_tokens_generated_total"));
    };
    const double before = generated();
    std::thread client([&] {
      httplib::Client c("127.0.0.1", router_port_);
      c.set_read_timeout(120, 0);
      json body = {{"model", model_id_},
                   {"prompt", prompt},
                   {"max_tokens", max_tokens},
                   {"temperature", temperature},
                   {"seed", 7},
                   {"ignore_eos", true}};
      auto r = c.Post("/v1/completions", body.dump(), "application/json");
      if (r) result = json::parse(r->body, nullptr, false);
    });
    double now = before;
    for (int i = 0; i < 1000 && now < before + 8; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      now = generated();
    }
    EXPECT_GE(now, before + 8) << "the completion never reached this decode worker";
    cut();
    client.join();
    return result;
  };
  // How many tokens the router's log says were delivered before the `nth` resume.
  auto delivered_before_resume = [&](int nth) {
    const std::string log = router_->output();
    const std::string marker = "; resuming it on another decode worker";
    size_t at = std::string::npos, from = 0;
    for (int i = 0; i < nth; ++i) {
      at = log.find(marker, from);
      if (at == std::string::npos) return -1;
      from = at + 1;
    }
    const size_t after = log.rfind(" ended after ", at);
    return after == std::string::npos ? -1 : std::atoi(log.c_str() + after + 13);
  };
  // Greedy, and sampled: a sampled resume draws what the cut-off generation would have.
  struct Case {
    const char* how;
    int metrics_port;
    float temperature;
    std::function<void()> cut;
  };
  const Case cases[] = {
      {"drained past --drain_seconds, greedy", first_metrics, 0.0f,
       [&] { EXPECT_EQ(first->Stop(), 0); }},
      {"killed, sampled at temperature 0.8", second_metrics, 0.8f, [&] { second.reset(); }},
  };
  for (int c = 0; c < 2; ++c) {
    SCOPED_TRACE(cases[c].how);
    const json r = run_and_cut(cases[c].metrics_port, cases[c].temperature, cases[c].cut);
    ASSERT_TRUE(r.contains("choices")) << r.dump() << router_->output();
    EXPECT_EQ(r["usage"]["completion_tokens"].get<int>(), max_tokens);
    const int n = delivered_before_resume(c + 1);
    ASSERT_GT(n, 0) << router_->output();
    ASSERT_LT(n, max_tokens);
    std::cout << "[measure] " << cases[c].how << ": " << n << " of " << max_tokens
              << " tokens delivered before the cut, the rest after the resume\n";
    // The tokens up to the cut are the uninterrupted ones; the rest the resume's.
    const std::vector<int32_t> whole = reference({}, cases[c].temperature);
    const std::vector<int32_t> done(whole.begin(), whole.begin() + n);
    EXPECT_EQ(r["choices"][0]["text"].get<std::string>(),
              tok.Decode(reference(done, cases[c].temperature), /*skip_special=*/true));
  }
}

TEST_F(FourProcessTest, CompletionEqualsServingEngineTokenForToken) {
  const std::string prompt = "The capital of France is";
  const int max_tokens = 12;
  const auto& tok = model_->tokenizer();
  const std::vector<int32_t> ids = tok.Encode(prompt, true);
  const std::vector<int32_t> ref = Reference(ids, max_tokens);
  const auto t0 = std::chrono::steady_clock::now();
  json r = Complete(prompt, max_tokens);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>(), tok.Decode(ref, true));
  EXPECT_EQ(r["usage"]["completion_tokens"].get<int>(), static_cast<int>(ref.size()));
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<int>(), static_cast<int>(ids.size()));
  std::cout << "[measure] four-process completion: codec " << codec_ << ", prompt "
            << ids.size() << " tokens, " << ref.size() << " generated, " << dt << " s\n";
  // And `oscarkv generate` with the same codec prints the prompt followed by the same text.
  std::string cmd = std::string(OSCARKV_BINARY) + " generate --prompt '" + prompt +
                    "' --max-tokens " + std::to_string(max_tokens) + " --codec " + codec_;
  if (!calibration_.empty()) cmd += " --calibration " + calibration_;
  FILE* gen = popen((cmd + " 2>/dev/null").c_str(), "r");
  ASSERT_NE(gen, nullptr);
  std::string printed;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), gen)) > 0) printed.append(buf, n);
  EXPECT_EQ(pclose(gen), 0);
  EXPECT_EQ(printed, prompt + r["choices"][0]["text"].get<std::string>() + "\n");
  // The decode worker received the prompt's blocks over UCX.
  EXPECT_GT(Sample(Get(decode_metrics_, "/metrics"), "oscarkv_decode_received_bytes_total"), 0);
}

TEST_F(FourProcessTest, SharedLongPrefixHitsTheKvStoreWithIdenticalAnswers) {
  const std::string base = AustenText(20000, 3600);
  if (base.empty()) GTEST_SKIP() << "data/text/austen absent (run scripts/setup.sh)";
  const auto& tok = model_->tokenizer();
  const std::string p1 = base + "\n\nQuestion: who is speaking here? Answer:";
  const std::string p2 = base + "\n\nSummarise the passage above in one sentence:";
  const std::vector<int32_t> ids2 = tok.Encode(p2, true);
  ASSERT_GT(ids2.size(), 256u + 256u + 64u) << "prompt too short to reuse anything";
  const int max_tokens = 6;

  const std::string m0 = Get(prefill_metrics_, "/metrics");
  const double reused0 = Sample(m0, "oscarkv_prefill_tokens_reused_total");
  const double computed0 = Sample(m0, "oscarkv_prefill_tokens_computed_total");
  const double hits0 =
      Sample(Get(kv_metrics_, "/metrics"), "oscarkv_kvstore_lookup_blocks_total{result=\"hit\"}");

  auto t0 = std::chrono::steady_clock::now();
  json r1 = Complete(p1, max_tokens);
  const double dt1 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string m1 = Get(prefill_metrics_, "/metrics");
  const double computed1 = Sample(m1, "oscarkv_prefill_tokens_computed_total");

  t0 = std::chrono::steady_clock::now();
  json r2 = Complete(p2, max_tokens);
  const double dt2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string m2 = Get(prefill_metrics_, "/metrics");
  const double reused2 = Sample(m2, "oscarkv_prefill_tokens_reused_total");
  const double computed2 = Sample(m2, "oscarkv_prefill_tokens_computed_total");
  const double hits2 =
      Sample(Get(kv_metrics_, "/metrics"), "oscarkv_kvstore_lookup_blocks_total{result=\"hit\"}");

  // The reuse boundary: the last chunk boundary at least the recent window before the end.
  // (Request 1 stored its blocks up to its own boundary; the prompts share all but the tail.)
  const int64_t n1 = static_cast<int64_t>(tok.Encode(p1, true).size());
  const int64_t n2 = static_cast<int64_t>(ids2.size());
  const int64_t boundary = std::min(engine_->ReuseBoundary(n1), engine_->ReuseBoundary(n2));
  EXPECT_EQ(reused2 - reused0, static_cast<double>(boundary));  // r1 stored those blocks
  EXPECT_EQ(computed2 - computed1, static_cast<double>(n2 - boundary));  // suffix + recent
  EXPECT_EQ(computed1 - computed0, static_cast<double>(n1));
  EXPECT_EQ(hits2 - hits0, static_cast<double>(boundary / 64));
  // Answers equal the in-process reference computed without any reuse.
  EXPECT_EQ(r2["choices"][0]["text"].get<std::string>(), tok.Decode(Reference(ids2, max_tokens), true));
  EXPECT_EQ(r1["choices"][0]["text"].get<std::string>(),
            tok.Decode(Reference(tok.Encode(p1, true), max_tokens), true));
  std::cout << "[measure] prefix reuse: prompt " << n2 << " tokens, reused " << boundary
            << ", computed " << (n2 - boundary) << "; request 1 (cold) " << dt1
            << " s, request 2 (hit) " << dt2 << " s\n";
}

// A client that leaves while its long prompt is being prefilled stops the prefill worker's
// work within about a chunk: the router cancels the Prefill RPC, and the worker checks its
// call before each chunk (oscarkv_prefill_cancelled_total; no prefill completes).
TEST_F(FourProcessTest, AClientThatLeavesDuringThePrefillStopsIt) {
  const std::string text = AustenText(40000, 20000);  // ~5k tokens: seconds of CPU prefill
  if (text.empty()) GTEST_SKIP() << "data/text/austen absent (run scripts/setup.sh)";
  auto metric = [](const std::string& name) {
    return Sample(Get(prefill_metrics_, "/metrics"), name);
  };
  const double cancelled0 = metric("oscarkv_prefill_cancelled_total");
  const double completed0 = metric("oscarkv_prefill_requests_total");
  const double failed0 = metric("oscarkv_prefill_failures_total");
  const json body = {{"model", model_id_}, {"prompt", text}, {"max_tokens", 4},
                     {"temperature", 0}};
  testing::PostThenHangUp(router_port_, body.dump(), absl::Milliseconds(500));
  const auto left = std::chrono::steady_clock::now();
  while (metric("oscarkv_prefill_cancelled_total") == cancelled0 &&
         std::chrono::steady_clock::now() - left < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double stop_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - left).count();
  EXPECT_EQ(metric("oscarkv_prefill_cancelled_total"), cancelled0 + 1) << prefill_->output();
  EXPECT_EQ(metric("oscarkv_prefill_requests_total"), completed0) << "it never completed";
  EXPECT_EQ(metric("oscarkv_prefill_failures_total"), failed0) << "a stop is not a failure";
  // The worker is free again: a short request is served at once.
  EXPECT_FALSE(Complete("The capital of France is", 2)["choices"].empty());
  std::cout << "[measure] client left 0.5 s into a " << model_->tokenizer().Encode(text, true).size()
            << "-token prefill; the prefill worker stopped " << stop_s << " s later\n";
}

}  // namespace
}  // namespace oscarkv::e2e
