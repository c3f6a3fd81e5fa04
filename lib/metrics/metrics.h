// A small Prometheus metrics registry with text exposition (format 0.0.4).
//
// Usage (one `<svc>_metrics.{h,cc}` per service declares every family at startup):
//
//   metrics::Registry registry;
//   auto& evicted = registry.AddCounter("oscarkv_kvstore_blocks_evicted_total",
//                                       "Blocks evicted from the pool.", {"tier"});
//   metrics::Counter& evicted_gpu = evicted.WithLabels({"gpu"});   // keep this handle
//   ...
//   evicted_gpu.Increment();                                        // hot path: one atomic add
//   std::string text = registry.Expose();                           // what /metrics serves
//
// Names follow `oscarkv_<what>_<unit>` in base units (bytes, seconds; ratios not percents):
// counters end in `_total`; no family may end in `_bucket`, `_sum` or `_count`, or use a
// non-base unit word (`ms`, `milliseconds`, `kb`, `mb`, `gib`, `percent`, ...). Declaring a family
// with a bad name, bad label names, or a name already used with another type/help/labels is a
// programming error and CHECK-fails; ValidateMetricName()/ValidateLabelName() let callers check first.
//
// Thread-safety: everything is thread-safe. Counter/Gauge/Histogram updates are lock-free
// (relaxed atomics). Add*/WithLabels take a mutex: call them at startup or rarely, and keep the
// returned references, which stay valid for the Registry's lifetime. Expose() takes the same
// mutexes briefly; values are read atomically one by one, so a scrape is not a global snapshot
// (a histogram's _count always equals its +Inf bucket).
#ifndef OSCARKV_LIB_METRICS_METRICS_H_
#define OSCARKV_LIB_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace oscarkv::metrics {

// Content-Type of Registry::Expose() output.
inline constexpr char kExpositionContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// @return kInvalidArgument with the reason when `name` breaks the naming rules above for a family
// of `type` ("counter", "gauge" or "histogram").
absl::Status ValidateMetricName(std::string_view name, std::string_view type);
// @return kInvalidArgument unless `name` matches [a-zA-Z_][a-zA-Z0-9_]* and does not start with
// "__" (reserved); "le" is also refused for histograms.
absl::Status ValidateLabelName(std::string_view name, std::string_view type);

// Bucket upper bounds `start * factor^i`, i = 0..count-1 (start > 0, factor > 1, count >= 1).
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bucket upper bounds `start + width * i`, i = 0..count-1 (width > 0, count >= 1).
std::vector<double> LinearBuckets(double start, double width, int count);

// A monotonically increasing value.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // `amount` must be >= 0 (DCHECK); a negative or NaN amount is ignored in release builds.
  void Increment(double amount = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount) { value_.fetch_add(amount, std::memory_order_relaxed); }
  void Sub(double amount) { value_.fetch_sub(amount, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (Prometheus `le` semantics: bucket i counts values
// <= bounds[i]; +Inf is implicit).
class Histogram {
 public:
  // `bounds`: finite, strictly increasing upper bounds (CHECKed by the family).
  explicit Histogram(const std::vector<double>* bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN observations are counted in +Inf only and make the sum NaN, as in Prometheus clients.
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf last (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double>* bounds_;                 // owned by the family
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_->size() + 1, not cumulative
  std::atomic<double> sum_{0.0};
};

class Registry;

// A metric family: one name, one type, fixed label names, one child per label-value tuple.
template <typename T>
class Family {
 public:
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // The child for these label values (created on first use), in the order of the family's label
  // names; CHECK-fails on a count mismatch. The reference is valid for the Registry's lifetime.
  T& WithLabels(const std::vector<std::string>& label_values);
  // The child of a family without labels.
  T& Get() { return WithLabels({}); }

  const std::string& name() const { return name_; }

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds);
  void Expose(std::string& out) const;

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;  // guarded by mu_
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// Owns metric families and renders them. Not copyable; typically one per process (shared by the
// servers of `oscarkv serve`; re-declaring an identical family returns the existing one).
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Declare a family. CHECK-fails on an invalid name or label name, or on a name already declared
  // with a different type, help or label names. A family without labels exposes 0 from the start.
  CounterFamily& AddCounter(std::string_view name, std::string_view help,
                            const std::vector<std::string>& label_names = {});
  GaugeFamily& AddGauge(std::string_view name, std::string_view help,
                        const std::vector<std::string>& label_names = {});
  // `bounds`: finite, strictly increasing, at least one.
  HistogramFamily& AddHistogram(std::string_view name, std::string_view help,
                                std::vector<double> bounds,
                                const std::vector<std::string>& label_names = {});

  // `callback` runs at the start of every Expose() (e.g. to Set() gauges sampled on demand). It
  // must not call Expose() or Add*().
  void AddCollectCallback(std::function<void()> callback);

  // All families, sorted by name, children sorted by label values, in text format 0.0.4.
  std::string Expose() const;

 private:
  struct Entry;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> families_;  // guarded by mu_
  std::vector<std::function<void()>> callbacks_;                        // guarded by mu_
};

// Formats a sample value as the exposition format wants: shortest round-trip decimal, "+Inf",
// "-Inf", "NaN". Exposed for tests and for other text endpoints.
std::string FormatValue(double value);
// Escapes a label value (backslash, double quote, newline) for use inside "...".
std::string EscapeLabelValue(std::string_view value);
// Escapes HELP text (backslash, newline).
std::string EscapeHelp(std::string_view help);

}  // namespace oscarkv::metrics

#endif  // OSCARKV_LIB_METRICS_METRICS_H_
