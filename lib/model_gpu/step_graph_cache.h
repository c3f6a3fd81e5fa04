// Replays captured CUDA graphs of the work a step enqueues on one stream, keyed by everything that
// decides that step's launches (batch size, grid sizes, which optional kernels run). A decode step
// of a small model is hundreds of short kernels, and issuing them one by one on the host takes
// longer than running them: a graph launch issues them all at once.
//
// The work must depend on the key alone for its launches: the same kernels, grids and argument
// values (device pointers included) for the same key; only the contents of device memory may
// differ between steps. The first time a key is seen the work runs directly (lazy set-up such as
// cudaFuncSetAttribute then happens outside any capture), the second time it is captured and
// launched, later it is replayed. A key whose capture fails runs directly from then on. Not
// thread-safe; one stream per cache.
#ifndef OSCARKV_LIB_MODEL_GPU_STEP_GRAPH_CACHE_H_
#define OSCARKV_LIB_MODEL_GPU_STEP_GRAPH_CACHE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace oscarkv::model_gpu {

class StepGraphCache {
 public:
  using Key = std::vector<int64_t>;

  // At most `capacity` graphs are kept; the least recently used goes first.
  explicit StepGraphCache(int capacity = 16) : capacity_(capacity) {}
  ~StepGraphCache() { Clear(); }
  StepGraphCache(const StepGraphCache&) = delete;
  StepGraphCache& operator=(const StepGraphCache&) = delete;

  // Enqueues `enqueue`'s work on `stream`, directly or by a graph (see above). An error of
  // `enqueue` itself is returned as it is; nothing of a failed capture runs.
  absl::Status Run(const Key& key, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue);

  // Forgets every graph and key, e.g. when a buffer that the graphs point into was reallocated.
  void Clear();

  struct Counts {
    int64_t direct = 0, captured = 0, replayed = 0, capture_failures = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  struct Entry {
    Key key;
    cudaGraphExec_t exec = nullptr;  // null: seen once, or its capture failed
    bool failed = false;
    uint64_t last_use = 0;
  };
  Entry* Find(const Key& key);
  Entry& Insert(const Key& key);
  // Captures `enqueue` into entry.exec; false (stream left usable, nothing run) on failure.
  bool Capture(Entry& entry, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue,
               absl::Status* enqueue_status);

  int capacity_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
  Counts counts_;
};

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_STEP_GRAPH_CACHE_H_
