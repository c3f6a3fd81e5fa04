// A persistent pool of worker threads for decode: the matrix-vector products (quant_gemv.cc) and
// the batch's attention (model.cc), through RunOnCpuPool.
// Decode runs ~200 small GEMVs per token; an OpenMP fork/join per GEMV cost ~21% of the decode
// time on 2 cores. Here the workers stay alive and spin briefly between jobs (a job is handed
// over through one atomic, ~0.1-1 us), then sleep on a futex when no job comes for a while, so
// an idle process does not burn its cores.
#ifndef OSCARKV_LIB_MODEL_THREAD_POOL_H_
#define OSCARKV_LIB_MODEL_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace oscarkv::model {

class ThreadPool {
 public:
  // A job: fn(ctx, worker, workers) runs once on each worker, worker in [0, workers).
  using JobFn = void (*)(const void* ctx, int worker, int workers);

  // `threads` >= 1 workers in all, counting the thread that calls Run (worker 0); threads - 1
  // are started here.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs fn on every worker, the caller being worker 0, and returns when all have finished.
  // One Run at a time: not thread-safe (the caller serializes; see RunOnCpuPool).
  void Run(JobFn fn, const void* ctx);

  // Typed convenience: f(worker, workers) for a callable f.
  template <typename F>
  void RunFor(const F& f) {
    Run([](const void* c, int w, int n) { (*static_cast<const F*>(c))(w, n); }, &f);
  }

 private:
  void WorkerLoop(int worker);

  std::vector<std::thread> threads_;
  JobFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  // Bumped once per job (and once at shutdown); workers wait for it to change.
  alignas(64) std::atomic<uint32_t> generation_{0};
  // Workers still running the current job.
  alignas(64) std::atomic<int> pending_{0};
  // Workers blocked in generation_.wait (so Run only makes the futex call when one sleeps).
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

// Runs f(worker, workers) on the process's shared CPU pool, sized to the OpenBLAS thread count
// (SetCpuThreads / --threads), the caller being worker 0, and returns when all have finished.
// Thread-safe: one caller at a time gets the pool; a caller that finds it busy (another thread's
// job, or a job calling this from inside itself) runs f(0, 1) alone.
void RunOnCpuPool(const std::function<void(int worker, int workers)>& f);

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_THREAD_POOL_H_
