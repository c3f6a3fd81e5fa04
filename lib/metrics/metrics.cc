#include "lib/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/log.h"

namespace oscarkv::metrics {
namespace {

constexpr std::string_view kPrefix = "oscarkv_";

// Unit words that are not base units (bytes, seconds) or that hide a scale factor.
constexpr std::string_view kNonBaseUnits[] = {
    "ms",       "us",        "ns",           "millis",       "milliseconds", "microseconds",
    "nanoseconds", "minutes", "hours",       "kb",           "mb",           "gb",
    "tb",       "kib",       "mib",          "gib",          "tib",          "kilobytes",
    "megabytes", "gigabytes", "percent",     "pct"};

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

void AppendLabels(std::string& out, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, std::string_view le = {}) {
  if (names.empty() && le.empty()) return;
  out += '{';
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    absl::StrAppend(&out, names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!le.empty()) absl::StrAppend(&out, names.empty() ? "" : ",", "le=\"", std::string(le), "\"");
  out += '}';
}

}  // namespace

absl::Status ValidateMetricName(std::string_view name, std::string_view type) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name \"", std::string(name), "\": ", std::string(why)));
  };
  if (!name.starts_with(kPrefix) || name.size() == kPrefix.size()) {
    return bad("must be oscarkv_<what>_<unit>");
  }
  for (char c : name) {
    if (!IsLowerAlnum(c) && c != '_') return bad("only [a-z0-9_] allowed");
  }
  if (name.find("__") != std::string_view::npos || name.back() == '_') {
    return bad("empty word (double or trailing underscore)");
  }
  std::vector<std::string_view> words;
  for (std::string_view rest = name.substr(kPrefix.size());;) {
    const size_t cut = rest.find('_');
    words.push_back(rest.substr(0, cut));
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 1);
  }
  for (std::string_view w : words) {
    for (std::string_view unit : kNonBaseUnits) {
      if (w == unit) {
        return bad(absl::StrCat("unit \"", std::string(unit), "\" is not a base unit (use bytes, seconds, ratio)"));
      }
    }
  }
  const bool total = name.ends_with("_total");
  if (type == "counter") {
    if (!total) return bad("a counter's name must end in _total");
  } else if (type == "gauge" || type == "histogram") {
    if (total) return bad(absl::StrCat("only counters end in _total, this is a ", std::string(type)));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown metric type \"", std::string(type), "\""));
  }
  for (std::string_view reserved : {"_bucket", "_sum", "_count"}) {
    if (name.ends_with(reserved)) {
      return bad(absl::StrCat("suffix ", std::string(reserved), " is reserved for histogram series"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelName(std::string_view name, std::string_view type) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("label name \"", std::string(name), "\": ", std::string(why)));
  };
  if (name.empty()) return bad("empty");
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return bad("must match [a-zA-Z_][a-zA-Z0-9_]*");
  }
  if (name.starts_with("__")) return bad("names starting with __ are reserved");
  if (type == "histogram" && name == "le") return bad("\"le\" is reserved in histograms");
  return absl::OkStatus();
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  CHECK(start > 0 && factor > 1 && count >= 1) << "ExponentialBuckets(" << start << ", " << factor
                                               << ", " << count << ")";
  std::vector<double> b(count);
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b[i] = v;
  return b;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  CHECK(width > 0 && count >= 1) << "LinearBuckets(" << start << ", " << width << ", " << count
                                 << ")";
  std::vector<double> b(count);
  for (int i = 0; i < count; ++i) b[i] = start + width * i;
  return b;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, r.ptr);
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

// ---- Counter, Histogram ----

void Counter::Increment(double amount) {
  DCHECK(amount >= 0) << "Counter::Increment(" << amount << ")";
  if (!(amount >= 0)) return;  // negative or NaN
  value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // First bound >= value; NaN compares false everywhere and lands in +Inf.
  const size_t i = static_cast<size_t>(
      std::lower_bound(bounds_->begin(), bounds_->end(), value) - bounds_->begin());
  counts_[std::isnan(value) ? bounds_->size() : i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.cumulative.resize(bounds_->size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

// ---- Family ----

template <typename T>
Family<T>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

template <typename T>
T& Family<T>::WithLabels(const std::vector<std::string>& label_values) {
  CHECK(label_values.size() == label_names_.size())
      << name_ << ": " << label_values.size() << " label values for "
      << label_names_.size() << " label names (" << absl::StrJoin(label_names_, ",") << ")";
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = children_[label_values];
  if (!slot) {
    if constexpr (std::is_same_v<T, Histogram>) {
      slot = std::make_unique<Histogram>(&bounds_);
    } else {
      slot = std::make_unique<T>();
    }
  }
  return *slot;
}

template <typename T>
void Family<T>::Expose(std::string& out) const {
  const char* type = std::is_same_v<T, Counter> ? "counter"
                     : std::is_same_v<T, Gauge> ? "gauge"
                                                : "histogram";
  absl::StrAppend(&out, "# HELP ", name_, " ", EscapeHelp(help_), "\n");
  absl::StrAppend(&out, "# TYPE ", name_, " ", type, "\n");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_) {
    if constexpr (std::is_same_v<T, Histogram>) {
      const Histogram::Snapshot s = child->Read();
      for (size_t i = 0; i <= bounds_.size(); ++i) {
        out += name_;
        out += "_bucket";
        AppendLabels(out, label_names_, values,
                     i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf");
        absl::StrAppend(&out, " ", s.cumulative[i], "\n");
      }
      out += name_;
      out += "_sum";
      AppendLabels(out, label_names_, values);
      absl::StrAppend(&out, " ", FormatValue(s.sum), "\n");
      out += name_;
      out += "_count";
      AppendLabels(out, label_names_, values);
      absl::StrAppend(&out, " ", s.count, "\n");
    } else {
      out += name_;
      AppendLabels(out, label_names_, values);
      absl::StrAppend(&out, " ", FormatValue(child->Value()), "\n");
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- Registry ----

struct Registry::Entry {
  std::string type;
  std::string help;
  std::vector<std::string> label_names;
  std::vector<double> bounds;
  std::unique_ptr<CounterFamily> counter;
  std::unique_ptr<GaugeFamily> gauge;
  std::unique_ptr<HistogramFamily> histogram;
};

Registry::Registry() = default;
Registry::~Registry() = default;

namespace {

void CheckDeclaration(std::string_view name, std::string_view type,
                      const std::vector<std::string>& label_names) {
  const absl::Status s = ValidateMetricName(name, type);
  CHECK(s.ok()) << s.ToString();
  for (size_t i = 0; i < label_names.size(); ++i) {
    const absl::Status ls = ValidateLabelName(label_names[i], type);
    CHECK(ls.ok()) << name << ": " << ls.ToString();
    for (size_t j = 0; j < i; ++j) {
      CHECK(label_names[i] != label_names[j]) << name << ": label " << label_names[i] << " twice";
    }
  }
}

}  // namespace

CounterFamily& Registry::AddCounter(std::string_view name, std::string_view help,
                                    const std::vector<std::string>& label_names) {
  CheckDeclaration(name, "counter", label_names);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    const Entry& e = *it->second;
    CHECK(e.type == "counter" && e.help == help && e.label_names == label_names)
        << "metric " << name << " already declared as a different " << e.type;
    return *e.counter;
  }
  auto e = std::make_unique<Entry>();
  e->type = "counter";
  e->help = std::string(help);
  e->label_names = label_names;
  e->counter.reset(new CounterFamily(std::string(name), e->help, label_names, {}));
  if (label_names.empty()) e->counter->Get();
  CounterFamily& f = *e->counter;
  families_.emplace(std::string(name), std::move(e));
  return f;
}

GaugeFamily& Registry::AddGauge(std::string_view name, std::string_view help,
                                const std::vector<std::string>& label_names) {
  CheckDeclaration(name, "gauge", label_names);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    const Entry& e = *it->second;
    CHECK(e.type == "gauge" && e.help == help && e.label_names == label_names)
        << "metric " << name << " already declared as a different " << e.type;
    return *e.gauge;
  }
  auto e = std::make_unique<Entry>();
  e->type = "gauge";
  e->help = std::string(help);
  e->label_names = label_names;
  e->gauge.reset(new GaugeFamily(std::string(name), e->help, label_names, {}));
  if (label_names.empty()) e->gauge->Get();
  GaugeFamily& f = *e->gauge;
  families_.emplace(std::string(name), std::move(e));
  return f;
}

HistogramFamily& Registry::AddHistogram(std::string_view name, std::string_view help,
                                        std::vector<double> bounds,
                                        const std::vector<std::string>& label_names) {
  CheckDeclaration(name, "histogram", label_names);
  CHECK(!bounds.empty()) << name << ": a histogram needs at least one bucket bound";
  for (size_t i = 0; i < bounds.size(); ++i) {
    CHECK(std::isfinite(bounds[i])) << name << ": bucket bound " << bounds[i] << " not finite";
    CHECK(i == 0 || bounds[i - 1] < bounds[i]) << name << ": bucket bounds not increasing";
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    const Entry& e = *it->second;
    CHECK(e.type == "histogram" && e.help == help && e.label_names == label_names &&
          e.bounds == bounds)
        << "metric " << name << " already declared as a different " << e.type;
    return *e.histogram;
  }
  auto e = std::make_unique<Entry>();
  e->type = "histogram";
  e->help = std::string(help);
  e->label_names = label_names;
  e->bounds = bounds;
  e->histogram.reset(
      new HistogramFamily(std::string(name), e->help, label_names, std::move(bounds)));
  if (label_names.empty()) e->histogram->Get();
  HistogramFamily& f = *e->histogram;
  families_.emplace(std::string(name), std::move(e));
  return f;
}

void Registry::AddCollectCallback(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.push_back(std::move(callback));
}

std::string Registry::Expose() const {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks = callbacks_;
  }
  for (const auto& cb : callbacks) cb();
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, e] : families_) {
    if (e->counter) e->counter->Expose(out);
    if (e->gauge) e->gauge->Expose(out);
    if (e->histogram) e->histogram->Expose(out);
  }
  return out;
}

}  // namespace oscarkv::metrics
