#include "services/decode/decode_batcher.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "lib/base/log.h"
#include "lib/model/thread_pool.h"

namespace oscarkv::decode {

namespace {
// From this many rows a step's sampling goes to the CPU pool. Fewer stay on this thread: a row
// takes ~15-90 µs on the default model's vocabulary, and the pool's workers may be asleep (a
// futex wake each) after a long model step. Not tuned: 32 rows gain ~5% on the H200 services
// (bench/model/NOTES.md "Session 37").
constexpr size_t kPooledSamplingRows = 4;
}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

struct DecodeBatcher::Entry {
  uint64_t id = 0;
  BatchRequest request;
  std::unique_ptr<engine::Sampler> sampler;
  int32_t next_input = 0;  // token fed at the next step
  int generated = 0;
};

DecodeBatcher::DecodeBatcher(StepFunction step, int vocab_size, int max_batch,
                             std::function<void(double seconds)> on_sampled)
    : step_(std::move(step)),
      on_sampled_(std::move(on_sampled)),
      vocab_size_(vocab_size),
      max_batch_(std::max(1, max_batch)) {
  CHECK(vocab_size_ > 0);
  thread_ = std::thread([this] { Loop(); });
}

DecodeBatcher::~DecodeBatcher() { Stop(); }

uint64_t DecodeBatcher::Submit(BatchRequest request) {
  auto e = std::make_unique<Entry>();
  e->sampler = std::make_unique<engine::Sampler>(request.sampling);
  for (int32_t t : request.earlier_tokens) e->sampler->Observe(t);
  e->sampler->Observe(request.first_token);  // generated too, for the penalties
  e->next_input = request.first_token;
  e->request = std::move(request);
  std::unique_lock<std::mutex> lock(mu_);
  e->id = next_id_++;
  const uint64_t id = e->id;
  if (stopping_) {
    const absl::Status status = stop_status_;
    lock.unlock();
    if (e->request.on_done) {
      e->request.on_done(status.ok() ? FinishReason::kCancelled : FinishReason::kError, status);
    }
    return id;
  }
  waiting_.push_back(std::move(e));
  cv_.notify_all();
  return id;
}

void DecodeBatcher::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.push_back(id);
  cv_.notify_all();
}

int DecodeBatcher::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size()) + active_count_;
}

BatcherStats DecodeBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DecodeBatcher::Stop(absl::Status unfinished) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    if (!stopping_) stop_status_ = std::move(unfinished);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void DecodeBatcher::Loop() {
  std::vector<std::unique_ptr<Entry>> active;
  std::vector<HeldSequence*> seqs;
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::vector<int32_t> argmax;                                 // per row, from the device
  std::vector<int32_t> sampled;                                // per row of the step
  std::vector<std::optional<engine::TokenLogprobs>> row_logprobs;  // per row, when asked for
  auto finish = [](Entry& e, FinishReason r, const absl::Status& s) {
    if (e.request.on_done) e.request.on_done(r, s);
  };
  while (true) {
    std::vector<uint64_t> cancelled;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !active.empty(); });
      if (stopping_) {
        for (auto& e : waiting_) active.push_back(std::move(e));
        waiting_.clear();
        active_count_ = 0;
        const absl::Status status = stop_status_;
        lock.unlock();
        for (auto& e : active) {
          finish(*e, status.ok() ? FinishReason::kCancelled : FinishReason::kError, status);
        }
        return;
      }
      // Join: oldest first, up to max_batch.
      size_t take = std::min(waiting_.size(), static_cast<size_t>(max_batch_) - active.size());
      for (size_t i = 0; i < take; ++i) active.push_back(std::move(waiting_[i]));
      waiting_.erase(waiting_.begin(), waiting_.begin() + take);
      cancelled.swap(cancelled_);
      // Cancels for ids still waiting stay pending until they join.
      for (const auto& w : waiting_) {
        if (std::find(cancelled.begin(), cancelled.end(), w->id) != cancelled.end()) {
          cancelled_.push_back(w->id);
        }
      }
      active_count_ = static_cast<int>(active.size());
    }
    // Leave: cancelled requests.
    for (auto it = active.begin(); it != active.end();) {
      if (std::find(cancelled.begin(), cancelled.end(), (*it)->id) != cancelled.end()) {
        finish(**it, FinishReason::kCancelled, absl::OkStatus());
        it = active.erase(it);
      } else {
        ++it;
      }
    }
    if (active.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      active_count_ = 0;
      continue;
    }

    seqs.clear();
    tokens.clear();
    for (auto& e : active) {
      seqs.push_back(e->request.sequence);
      tokens.push_back(e->next_input);
    }
    // A step whose rows all take the plain argmax asks the device for that alone (a GPU then
    // copies B ids instead of B rows of logits).
    const bool greedy_only = std::all_of(active.begin(), active.end(), [](const auto& e) {
      return e->request.logprobs < 0 && e->sampler->IsPlainGreedy();
    });
    argmax.clear();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = step_(seqs, tokens, &logits, greedy_only ? &argmax : nullptr);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t batch = active.size();
    const bool took_argmax = greedy_only && argmax.size() == batch;
    if (s.ok() && !took_argmax && logits.size() != batch * static_cast<size_t>(vocab_size_)) {
      s = absl::InternalError("decode step returned logits of the wrong size");
    }
    auto outside = [this](int32_t t) { return t < 0 || t >= vocab_size_; };
    if (s.ok() && took_argmax && std::any_of(argmax.begin(), argmax.end(), outside)) {
      s = absl::InternalError("decode step returned an argmax outside the vocabulary");
    }
    if (!s.ok()) {
      LOG(WARNING) << "decode step over " << active.size() << " sequences failed: " << s;
      for (auto& e : active) finish(*e, FinishReason::kError, s);
      active.clear();
      std::lock_guard<std::mutex> lock(mu_);
      active_count_ = 0;
      continue;
    }
    // Each row's token and logprobs: the sequences are independent (each its own sampler), so
    // the rows split over the CPU pool's workers; delivery below stays in order on this thread.
    const auto s0 = std::chrono::steady_clock::now();
    sampled.resize(batch);
    row_logprobs.assign(batch, std::nullopt);
    auto sample_rows = [&](int worker, int workers) {
      for (size_t b = static_cast<size_t>(worker); b < batch; b += static_cast<size_t>(workers)) {
        Entry& e = *active[b];
        const std::span<const float> row(logits.data() + b * vocab_size_, vocab_size_);
        sampled[b] = e.sampler->Sample(row);
        if (e.request.logprobs >= 0) {
          row_logprobs[b] = engine::ComputeLogprobs(row, sampled[b], e.request.logprobs);
        }
      }
    };
    if (took_argmax) {
      for (size_t b = 0; b < batch; ++b) {
        sampled[b] = argmax[b];
        active[b]->sampler->Observe(argmax[b]);
      }
    } else if (batch >= kPooledSamplingRows) {
      model::RunOnCpuPool(sample_rows);
    } else {
      sample_rows(0, 1);
    }
    const double sample_dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    if (on_sampled_) on_sampled_(sample_dt);

    uint64_t produced = 0;
    std::vector<std::unique_ptr<Entry>> still;
    // Finished entries are reported after the step's stats are recorded, so a caller woken by
    // on_done sees stats that include its own last token.
    std::vector<std::pair<std::unique_ptr<Entry>, FinishReason>> finished;
    still.reserve(active.size());
    for (size_t b = 0; b < active.size(); ++b) {
      Entry& e = *active[b];
      const int32_t token = sampled[b];
      ++produced;
      ++e.generated;
      const auto& stops = e.request.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        finished.emplace_back(std::move(active[b]), FinishReason::kStop);
        continue;
      }
      const std::optional<engine::TokenLogprobs>& logprobs = row_logprobs[b];
      if (e.request.on_token &&
          !e.request.on_token(token, logprobs ? &*logprobs : nullptr)) {
        finished.emplace_back(std::move(active[b]), FinishReason::kCancelled);
        continue;
      }
      if (e.generated >= e.request.max_new_tokens) {
        finished.emplace_back(std::move(active[b]), FinishReason::kLength);
        continue;
      }
      e.next_input = token;
      still.push_back(std::move(active[b]));
    }
    active.swap(still);
    {
      std::lock_guard<std::mutex> lock(mu_);
      active_count_ = static_cast<int>(active.size());
      stats_.steps += 1;
      stats_.tokens += produced;
      stats_.max_batch_seen = std::max<uint64_t>(stats_.max_batch_seen, batch);
      stats_.step_seconds += dt;
    }
    for (auto& [entry, reason] : finished) finish(*entry, reason, absl::OkStatus());
  }
}

}  // namespace oscarkv::decode
