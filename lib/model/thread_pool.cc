#include "lib/model/thread_pool.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

namespace oscarkv::model {
namespace {

// How long an idle worker spins before it sleeps. Decode hands out a job every few to few
// hundred microseconds, so workers spin through a token; after a millisecond without work
// (between requests) they sleep and cost nothing.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(1000);
// Spinning threads yield the core every this many pauses: when the process has more runnable
// threads than cores (OpenBLAS's own workers after a prefill, parallel tests, --threads above the
// core count) a pure spin holds the core the awaited thread needs, and decode collapsed from
// 47 to 0.8 tokens/s at 16 threads on 2 cores. sched_yield costs ~1 us when nobody waits.
constexpr int kPausesPerYield = 64;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  // generation_ starts at 0, the generation every worker has seen.
  for (int w = 1; w < threads; ++w) threads_.emplace_back([this, w] { WorkerLoop(w); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Run(JobFn fn, const void* ctx) {
  const int n = size();
  if (n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  pending_.store(n - 1, std::memory_order_relaxed);
  // seq_cst pairs with the worker's sleepers_ increment: either the worker sees the new
  // generation before it sleeps, or we see it asleep and wake it.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  fn(ctx, 0, n);
  for (int spins = 1; pending_.load(std::memory_order_acquire) > 0; ++spins) {
    _mm_pause();
    if (spins % kPausesPerYield == 0) std::this_thread::yield();
  }
}

void ThreadPool::WorkerLoop(int worker) {
  using Clock = std::chrono::steady_clock;
  // Not generation_.load(): the first Run may bump it before this thread starts.
  uint32_t seen = 0;
  while (true) {
    uint32_t g;
    auto spin_start = Clock::now();
    int spins = 0;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      _mm_pause();
      if (++spins % kPausesPerYield == 0) std::this_thread::yield();
      if (spins % 256 == 0 && Clock::now() - spin_start > kSpinBeforeSleep) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        generation_.wait(seen, std::memory_order_seq_cst);  // returns at once if it moved
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        spin_start = Clock::now();
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    fn_(ctx_, worker, size());
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

void RunOnCpuPool(const std::function<void(int worker, int workers)>& f) {
  // One pool per process. `busy` admits one job at a time; a flag rather than a mutex, so that a
  // job calling this from inside itself (on any of its threads) finds it taken instead of
  // relocking a mutex its own thread holds.
  struct SharedPool {
    std::atomic<bool> busy{false};
    std::unique_ptr<ThreadPool> pool;  // touched only by the thread that set `busy`
  };
  static SharedPool* shared = new SharedPool();
  const int threads = std::max(1, openblas_get_num_threads());
  if (threads == 1 || shared->busy.exchange(true, std::memory_order_acquire)) {
    f(0, 1);
    return;
  }
  if (shared->pool == nullptr || shared->pool->size() != threads) {
    shared->pool.reset();
    shared->pool = std::make_unique<ThreadPool>(threads);
  }
  shared->pool->RunFor(f);
  shared->busy.store(false, std::memory_order_release);
}

}  // namespace oscarkv::model
