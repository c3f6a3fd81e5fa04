#include "lib/model_gpu/step_graph_cache.h"

#include <algorithm>

#include "lib/base/log.h"
#include "lib/base/status_macros.h"
#include "lib/model_gpu/cuda_status.h"

namespace oscarkv::model_gpu {

StepGraphCache::Entry* StepGraphCache::Find(const Key& key) {
  for (Entry& e : entries_) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

StepGraphCache::Entry& StepGraphCache::Insert(const Key& key) {
  if (static_cast<int>(entries_.size()) >= std::max(1, capacity_)) {
    auto oldest =
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    // A graph still executing stays valid when its executable is destroyed (CUDA defers it).
    if (oldest->exec != nullptr) cudaGraphExecDestroy(oldest->exec);
    entries_.erase(oldest);
  }
  Entry& e = entries_.emplace_back();
  e.key = key;
  return e;
}

bool StepGraphCache::Capture(Entry& entry, cudaStream_t stream,
                             absl::FunctionRef<absl::Status()> enqueue,
                             absl::Status* enqueue_status) {
  // Relaxed: the lazy set-up some launchers do on a new shape (cudaFuncSetAttribute, occupancy
  // queries) is allowed while this thread captures.
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  *enqueue_status = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  cudaError_t e = end;
  if (e == cudaSuccess && enqueue_status->ok()) {
    e = cudaGraphInstantiate(&entry.exec, graph, 0);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (e != cudaSuccess || !enqueue_status->ok()) {
    cudaGetLastError();  // a failed capture's error is not sticky: clear it for later calls
    if (entry.exec != nullptr) cudaGraphExecDestroy(entry.exec);
    entry.exec = nullptr;
    if (e != cudaSuccess) {
      LOG(WARNING) << "decode step graph capture failed (" << cudaGetErrorString(e)
                   << "); this step shape runs without a graph";
    }
    return false;
  }
  return true;
}

absl::Status StepGraphCache::Run(const Key& key, cudaStream_t stream,
                                 absl::FunctionRef<absl::Status()> enqueue) {
  Entry* entry = Find(key);
  if (entry == nullptr) {  // first sighting: run directly
    Insert(key).last_use = ++clock_;
    ++counts_.direct;
    return enqueue();
  }
  entry->last_use = ++clock_;
  if (entry->exec == nullptr && !entry->failed) {
    absl::Status enqueue_status;
    if (!Capture(*entry, stream, enqueue, &enqueue_status)) {
      entry->failed = true;
      ++counts_.capture_failures;
      ++counts_.direct;
      return enqueue();  // nothing captured ran: run it now (an error of its own repeats here)
    }
    ++counts_.captured;
  } else if (entry->exec == nullptr) {
    ++counts_.direct;
    return enqueue();
  } else {
    ++counts_.replayed;
  }
  OSCARKV_CUDA_OK(cudaGraphLaunch(entry->exec, stream));
  return absl::OkStatus();
}

void StepGraphCache::Clear() {
  for (Entry& e : entries_) {
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  }
  entries_.clear();
}

}  // namespace oscarkv::model_gpu
