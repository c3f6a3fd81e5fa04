#include "lib/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numbers>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "absl/strings/str_cat.h"
#include "lib/base/splitmix64.h"
#include "lib/engine/finite_rows.h"
#include "lib/engine/vector_exp.h"

namespace oscarkv::engine {

namespace {

// Per-thread scratch of vocabulary size, so that a Sampler (one per sequence) holds none.
struct Scratch {
  std::vector<float> keys;      // the logits with non-finite ones as -inf, when there are any
  std::vector<float> weights;   // exp((key - max) / temperature), 0 for -inf
  std::vector<int32_t> order;   // DescendingOrder's
  std::vector<double> block_sums;
  std::vector<float> block_max;  // DescendingOrder's
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// The candidates in the order top-k and top-p are defined in (logit descending, then id),
// without sorting the vocabulary: logits are taken a band at a time, each reaching a few more
// factors of two of probability below the top (a band visits only the blocks of 64 logits whose
// maximum reaches it), and a band is ordered a chunk at a time (nth_element, then a sort of the
// chunk; chunks doubling), as far as the walk asks. A draw usually ends in the first chunks;
// the last band holds every other finite logit.
class DescendingOrder {
 public:
  DescendingOrder(std::span<const float> keys, float top, float temperature,
                  std::vector<int32_t>* order, std::vector<float>* block_max)
      : keys_(keys), top_(top), temperature_(temperature), order_(*order),
        block_max_(*block_max) {
    order_.clear();
    block_max_.clear();
    for (size_t at = 0; at < keys.size(); at += kBlock) {
      const size_t n = std::min(kBlock, keys.size() - at);
      block_max_.push_back(
          Eigen::Map<const Eigen::ArrayXf>(keys.data() + at, static_cast<Eigen::Index>(n))
              .maxCoeff());
    }
  }

  // The i-th candidate, or -1 past the finite logits.
  int32_t At(size_t i) {
    while (ordered_ <= i) {
      if (ordered_ == order_.size() && !AppendBand()) return -1;
      const auto first = order_.begin() + static_cast<ptrdiff_t>(ordered_);
      const size_t chunk = std::min(order_.size() - ordered_, std::max(kFirstChunk, chunk_));
      const auto last = first + static_cast<ptrdiff_t>(chunk);
      auto before = [this](int32_t a, int32_t b) {
        return keys_[a] > keys_[b] || (keys_[a] == keys_[b] && a < b);
      };
      if (last != order_.end()) std::nth_element(first, last, order_.end(), before);
      std::sort(first, last, before);
      ordered_ += chunk;
      chunk_ = 2 * chunk;
    }
    return order_[i];
  }

 private:
  static constexpr size_t kBlock = 64;
  static constexpr size_t kFirstChunk = 64;

  // Appends the next band's ids, unordered; false when every band has been appended.
  bool AppendBand() {
    // Probability ratios to the top, as powers of two, where the bands end.
    static constexpr float kBandBits[] = {4, 8, 12, 16, 24, 32, 64, 128};
    constexpr size_t kBands = std::size(kBandBits);
    if (band_ > kBands) return false;
    const float lo = band_ < kBands
                         ? top_ - temperature_ * std::numbers::ln2_v<float> * kBandBits[band_]
                         : -INFINITY;
    for (size_t b = 0; b < block_max_.size(); ++b) {
      if (block_max_[b] < lo || block_max_[b] == -INFINITY) continue;
      const size_t end = std::min(keys_.size(), (b + 1) * kBlock);
      for (size_t i = b * kBlock; i < end; ++i) {
        const float k = keys_[i];
        if (k < hi_ && k >= lo && k != -INFINITY) order_.push_back(static_cast<int32_t>(i));
      }
    }
    hi_ = lo;
    ++band_;
    chunk_ = kFirstChunk;
    return true;
  }

  std::span<const float> keys_;
  float top_;
  float temperature_;
  std::vector<int32_t>& order_;  // [0, ordered_) in order; then the current band, unordered
  std::vector<float>& block_max_;
  size_t ordered_ = 0;
  size_t chunk_ = kFirstChunk;  // the next chunk's size
  float hi_ = INFINITY;         // the next band is [its lower end, hi_)
  size_t band_ = 0;
};

// Σ w in double, by blocks of kSumBlock (8 running sums each, so the adds overlap).
constexpr size_t kSumBlock = 512;
double BlockSum(std::span<const float> w, size_t at) {
  const size_t end = std::min(w.size(), at + kSumBlock);
  double acc[8] = {};
  size_t i = at;
  for (; i + 8 <= end; i += 8) {
    for (size_t j = 0; j < 8; ++j) acc[j] += w[i + j];
  }
  for (; i < end; ++i) acc[0] += w[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
double SumInDouble(std::span<const float> w) {
  double sum = 0;
  for (size_t at = 0; at < w.size(); at += kSumBlock) sum += BlockSum(w, at);
  return sum;
}

// Argmax of finite logits: vectorised maxima of blocks, then the first place of the best in the
// first block that holds it.
int32_t ArgmaxOfFinite(std::span<const float> logits) {
  constexpr size_t kBlock = 256;
  float max = -INFINITY;
  size_t block = 0;
  for (size_t at = 0; at < logits.size(); at += kBlock) {
    const size_t n = std::min(kBlock, logits.size() - at);
    const float m =
        Eigen::Map<const Eigen::ArrayXf>(logits.data() + at, static_cast<Eigen::Index>(n))
            .maxCoeff();
    if (m > max) {
      max = m;
      block = at;
    }
  }
  const auto first = logits.begin() + static_cast<ptrdiff_t>(block);
  const auto last =
      logits.begin() + static_cast<ptrdiff_t>(std::min(logits.size(), block + kBlock));
  return static_cast<int32_t>(std::find(first, last, max) - logits.begin());
}

}  // namespace

absl::Status SamplingParams::Validate(int vocab_size) const {
  if (!(temperature >= 0.0f && temperature <= 100.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be in [0, 100], got ",
                                                   temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (top_k < 0) return absl::InvalidArgumentError("top_k must be >= 0");
  for (const auto& [name, value] :
       {std::pair{"presence_penalty", presence_penalty}, {"frequency_penalty", frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [-2, 2], got ", value));
    }
  }
  if (min_tokens < 0) return absl::InvalidArgumentError("min_tokens must be >= 0");
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || (vocab_size > 0 && token >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias token id ", token,
                                                     " is outside the vocabulary"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias of token ", token, " must be in [-100, 100], got ", bias));
    }
  }
  return absl::OkStatus();
}

int32_t Argmax(std::span<const float> logits) {
  if (!logits.empty() && AllFinite(logits)) return ArgmaxOfFinite(logits);
  int32_t best = 0;
  float best_v = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = std::isfinite(logits[i]) ? logits[i] : -INFINITY;
    if (v > best_v) {
      best_v = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

void Sampler::Observe(int32_t token) {
  ++generated_count_;
  if (penalized()) ++generated_[token];
}

int32_t Sampler::Sample(std::span<const float> logits) {
  const bool ban = generated_count_ < params_.min_tokens && !params_.min_tokens_banned.empty();
  if (!ban && params_.logit_bias.empty() && (!penalized() || generated_.empty())) {
    const int32_t token = SampleAdjusted(logits);
    Observe(token);
    return token;
  }
  adjusted_.assign(logits.begin(), logits.end());
  auto in_vocab = [&](int32_t token) {
    return token >= 0 && static_cast<size_t>(token) < adjusted_.size();
  };
  for (const auto& [token, bias] : params_.logit_bias) {
    if (in_vocab(token)) adjusted_[token] += bias;
  }
  for (const auto& [token, count] : generated_) {
    if (!in_vocab(token)) continue;
    adjusted_[token] -= static_cast<float>(count) * params_.frequency_penalty +
                        params_.presence_penalty;
  }
  if (ban) {
    for (int32_t token : params_.min_tokens_banned) {
      if (in_vocab(token)) adjusted_[token] = -INFINITY;
    }
  }
  const int32_t token = SampleAdjusted(adjusted_);
  Observe(token);
  return token;
}

double Sampler::Draw(double total) const {
  // The seed is mixed first so that seeds a multiple of the increment apart are not one stream
  // shifted by a token.
  const uint64_t bits =
      SplitMix64Mix(SplitMix64Mix(params_.seed) +
                    (static_cast<uint64_t>(generated_count_) + 1) * kSplitMix64Increment);
  return static_cast<double>(bits >> 11) * 0x1.0p-53 * total;  // 53 bits of [0, 1), scaled
}

// With neither top-k nor top-p the order of the inverse CDF is free: ids ascending, found by the
// block sums first, so nothing is sorted.
int32_t Sampler::DrawInIdOrder(std::span<const float> weight, int32_t fallback) {
  std::vector<double>& blocks = ThreadScratch().block_sums;
  blocks.clear();
  double total = 0;
  for (size_t at = 0; at < weight.size(); at += kSumBlock) {
    blocks.push_back(BlockSum(weight, at));
    total += blocks.back();
  }
  const double u = Draw(total);
  double acc = 0;
  size_t b = 0;
  while (b + 1 < blocks.size() && !(u < acc + blocks[b])) acc += blocks[b++];
  int32_t last = fallback;
  const size_t end = std::min(weight.size(), (b + 1) * kSumBlock);
  for (size_t i = b * kSumBlock; i < end; ++i) {
    if (weight[i] == 0.0f) continue;
    acc += weight[i];
    last = static_cast<int32_t>(i);
    if (u < acc) return last;
  }
  return last;  // rounding left u at the end of its block
}

int32_t Sampler::SampleAdjusted(std::span<const float> logits) {
  if (params_.temperature == 0.0f) return Argmax(logits);
  Scratch& scratch = ThreadScratch();
  std::span<const float> keys = logits;
  const bool finite = AllFinite(logits);
  if (!finite) {
    scratch.keys.assign(logits.begin(), logits.end());
    for (float& k : scratch.keys) {
      if (!std::isfinite(k)) k = -INFINITY;
    }
    keys = scratch.keys;
  }
  const int32_t best = finite ? ArgmaxOfFinite(keys) : Argmax(keys);
  const float top = keys[best];
  const float inverse_temperature = 1.0f / params_.temperature;
  // Nothing to sample from, or a temperature so small (subnormal) that it is greedy.
  if (top == -INFINITY || !std::isfinite(inverse_temperature)) return best;
  // Softmax numerators at the temperature (-inf weighs 0).
  const size_t vocab = keys.size();
  scratch.weights.resize(vocab);
  ExpShifted(keys, top, inverse_temperature, scratch.weights);
  const std::vector<float>& weight = scratch.weights;

  const bool filtered = params_.top_p < 1.0f ||
                        (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab);
  if (!filtered) return DrawInIdOrder(weight, best);

  // The candidates in order, as far as the draw needs them.
  DescendingOrder order(keys, top, params_.temperature, &scratch.order, &scratch.block_max);
  // Top-k: the first k candidates; else all of them.
  size_t count = vocab;
  double sum = 0;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab) {
    count = static_cast<size_t>(params_.top_k);
    for (size_t i = 0; i < count; ++i) {
      const int32_t id = order.At(i);
      if (id < 0) break;
      sum += weight[id];
    }
  } else {
    sum = SumInDouble(weight);
  }
  // Nucleus: the smallest prefix with mass >= top_p.
  size_t n = count;
  double total = sum;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    total = 0;
    for (size_t i = 0; i < count; ++i) {
      const int32_t id = order.At(i);
      if (id < 0) break;
      mass += weight[id] / sum;
      total += weight[id];
      if (mass >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  const double u = Draw(total);
  double acc = 0;
  int32_t last = best;
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = order.At(i);
    if (id < 0) break;
    acc += weight[id];
    last = id;
    if (u < acc) return id;
  }
  return last;  // rounding left u at the very end
}

}  // namespace oscarkv::engine
