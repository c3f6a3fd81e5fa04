#include "lib/model_gpu/kv_page_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/attention/decode_attention.h"

namespace oscarkv::model_gpu {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t Bf16PageBytes(const KvPageTableConfig& c) {
  return kernels::Bf16PageUnitBytes(c.head_dim) * c.num_kv_heads * c.num_layers;
}

int64_t Int2PageBytes(const KvPageTableConfig& c) {
  return kernels::Int2PageUnitBytes(c.head_dim) * c.num_kv_heads * c.num_layers;
}

PageCount PagesForTokens(const KvPageTableConfig& c, int64_t tokens) {
  PageCount p;
  if (tokens <= 0) return p;
  if (!c.windowed) {
    p.bf16 = static_cast<int32_t>(CeilDiv(tokens, kPageTokens));
    return p;
  }
  // Peak BF16 use: the recent window reaches W + 8 tokens for one step before its oldest page is
  // demoted.
  const int64_t sink = std::min<int64_t>(tokens, c.sink_tokens);
  const int64_t recent_peak = std::min<int64_t>(std::max<int64_t>(0, tokens - c.sink_tokens),
                                                c.recent_tokens + kPageTokens);
  p.bf16 = static_cast<int32_t>(CeilDiv(sink, kPageTokens) + CeilDiv(recent_peak, kPageTokens));
  p.int2 = static_cast<int32_t>(
      std::max<int64_t>(0, tokens - c.sink_tokens - c.recent_tokens) / kPageTokens);
  return p;
}

PageCount PagesHeld(const KvPageTableConfig& c, int64_t tokens) {
  PageCount p;
  if (tokens <= 0) return p;
  if (!c.windowed) return PagesForTokens(c, tokens);
  // Between steps the recent window holds W..W+7 tokens; the 8-aligned rest is INT2.
  const int64_t int2_tokens =
      std::max<int64_t>(0, tokens - c.sink_tokens - c.recent_tokens) / kPageTokens * kPageTokens;
  const int64_t sink = std::min<int64_t>(tokens, c.sink_tokens);
  const int64_t recent = tokens - sink - int2_tokens;
  p.bf16 = static_cast<int32_t>(CeilDiv(sink, kPageTokens) + CeilDiv(recent, kPageTokens));
  p.int2 = static_cast<int32_t>(int2_tokens / kPageTokens);
  return p;
}

PackedKvLayout PackedLayoutFor(const KvPageTableConfig& c, int64_t length) {
  const PageCount n = PagesHeld(c, length);
  PackedKvLayout layout;
  layout.length = length;
  layout.layers = c.num_layers;
  layout.bf16_pages = n.bf16;
  layout.int2_pages = n.int2;
  layout.bf16_chunk_bytes = int64_t{c.num_kv_heads} * kernels::Bf16PageUnitBytes(c.head_dim);
  layout.int2_chunk_bytes = int64_t{c.num_kv_heads} * kernels::Int2PageUnitBytes(c.head_dim);
  return layout;
}

absl::StatusOr<KvPageTable> KvPageTable::Create(const KvPageTableConfig& c) {
  if (c.num_layers <= 0 || c.num_kv_heads <= 0 || (c.head_dim != 64 && c.head_dim != 128)) {
    return absl::InvalidArgumentError(absl::StrCat("KV page table: bad shape L=", c.num_layers,
                                                   " Hkv=", c.num_kv_heads, " D=", c.head_dim));
  }
  if (c.windowed && (c.sink_tokens % kPageTokens != 0 || c.recent_tokens % kPageTokens != 0 ||
                     c.recent_tokens <= 0)) {
    return absl::InvalidArgumentError("KV page table: sink and recent must be multiples of 8");
  }
  if (c.budget_bytes <= 0 || c.bf16_pages < 0 || c.int2_pages < 0) {
    return absl::InvalidArgumentError("KV page table: the budget and page counts must be > 0");
  }
  return KvPageTable(c);
}

KvPageTable::KvPageTable(const KvPageTableConfig& c) : config_(c) {
  // Free lists popped from the back: hand out low page ids first.
  free_bf16_.resize(c.bf16_pages);
  for (int32_t i = 0; i < c.bf16_pages; ++i) free_bf16_[i] = c.bf16_pages - 1 - i;
  free_int2_.resize(c.int2_pages);
  for (int32_t i = 0; i < c.int2_pages; ++i) free_int2_[i] = c.int2_pages - 1 - i;
}

bool KvPageTable::CanAdmit(int64_t max_tokens) const {
  const PageCount p = PagesForTokens(config_, max_tokens);
  const int64_t bytes = p.bf16 * Bf16PageBytes(config_) + p.int2 * Int2PageBytes(config_);
  return used_bytes_ + bytes <= config_.budget_bytes &&
         reserved_bf16_ + p.bf16 <= config_.bf16_pages &&
         reserved_int2_ + p.int2 <= config_.int2_pages;
}

absl::Status KvPageTable::Admit(int64_t id, int64_t max_tokens) {
  if (seqs_.count(id) != 0) return absl::InvalidArgumentError(absl::StrCat("sequence ", id, " exists"));
  if (max_tokens <= 0) return absl::InvalidArgumentError("a sequence needs at least one token");
  const PageCount p = PagesForTokens(config_, max_tokens);
  const int64_t bytes = p.bf16 * Bf16PageBytes(config_) + p.int2 * Int2PageBytes(config_);
  if (bytes > config_.budget_bytes || p.bf16 > config_.bf16_pages ||
      p.int2 > config_.int2_pages) {
    return absl::InvalidArgumentError(
        absl::StrCat(max_tokens, " tokens need ", bytes, " bytes of KV (", p.bf16,
                     " BF16 + ", p.int2, " INT2 pages); the budget is ", config_.budget_bytes,
                     " bytes (", config_.bf16_pages, " + ", config_.int2_pages, " pages)"));
  }
  if (!CanAdmit(max_tokens)) {
    return absl::ResourceExhaustedError(absl::StrCat("KV budget full: ", used_bytes_, " of ",
                                                     config_.budget_bytes, " bytes reserved"));
  }
  SeqPages s;
  s.reserved = p;
  s.reserved_bytes = bytes;
  used_bytes_ += bytes;
  reserved_bf16_ += p.bf16;
  reserved_int2_ += p.int2;
  seqs_.emplace(id, std::move(s));
  return absl::OkStatus();
}

int32_t KvPageTable::TakeBf16(SeqPages& s) {
  const int32_t page = free_bf16_.back();
  free_bf16_.pop_back();
  s.bf16.push_back(page);
  return page;
}

int32_t KvPageTable::TakeInt2(SeqPages& s) {
  const int32_t page = free_int2_.back();
  free_int2_.pop_back();
  s.int2.push_back(page);
  return page;
}

absl::StatusOr<AppendPlan> KvPageTable::Append(int64_t id, int64_t n) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("sequence ", id, " unknown"));
  SeqPages& s = it->second;
  if (n <= 0) return absl::InvalidArgumentError("append of no tokens");
  if (s.length > 0 && n != 1) {
    return absl::UnimplementedError("the GPU cache appends a prompt to an empty sequence only");
  }
  const PageCount need = PagesForTokens(config_, s.length + n);
  if (need.bf16 > s.reserved.bf16 || need.int2 > s.reserved.int2) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", id, " grows past the ",
                                              "tokens it was admitted for"));
  }
  AppendPlan plan;
  const int sink = config_.sink_tokens, window = config_.recent_tokens;
  auto put_bf16 = [&](int32_t token_index, int64_t tier_pos) {
    if (tier_pos % kPageTokens == 0) TakeBf16(s);
    plan.token_index.push_back(token_index);
    plan.bf16_page.push_back(s.bf16[tier_pos / kPageTokens]);
    plan.bf16_row.push_back(static_cast<int32_t>(tier_pos % kPageTokens));
    ++s.bf16_tokens;
  };
  if (!config_.windowed) {
    for (int64_t i = 0; i < n; ++i) put_bf16(static_cast<int32_t>(i), s.length + i);
  } else if (s.length == 0) {
    // Prefill: the state after n tokens, history placed straight into INT2 pages.
    const int64_t sink_n = std::min<int64_t>(n, sink);
    const int64_t hist = std::max<int64_t>(0, n - sink - window) / kPageTokens * kPageTokens;
    for (int64_t i = 0; i < sink_n; ++i) put_bf16(static_cast<int32_t>(i), i);
    plan.hist_begin = sink;
    for (int64_t p = 0; p < hist / kPageTokens; ++p) plan.hist_pages.push_back(TakeInt2(s));
    s.int2_tokens = static_cast<int32_t>(hist);
    for (int64_t i = sink_n + hist; i < n; ++i) {
      put_bf16(static_cast<int32_t>(i), s.bf16_tokens);
    }
  } else {
    // Decode: one token, then demote the oldest recent page if the window is W + 8 long.
    put_bf16(0, s.bf16_tokens);
    const int64_t recent = s.bf16_tokens - sink;
    if (s.length + 1 > sink && recent == window + kPageTokens) {
      const size_t first_recent = static_cast<size_t>(sink / kPageTokens);
      const int32_t src = s.bf16[first_recent];
      s.bf16.erase(s.bf16.begin() + static_cast<std::ptrdiff_t>(first_recent));
      pending_free_bf16_.push_back(src);
      s.bf16_tokens -= kPageTokens;
      plan.demote_src.push_back(src);
      plan.demote_dst.push_back(TakeInt2(s));
      s.int2_tokens += kPageTokens;
    }
  }
  s.length += n;
  return plan;
}

void KvPageTable::ReleaseDemoted() {
  free_bf16_.insert(free_bf16_.end(), pending_free_bf16_.begin(), pending_free_bf16_.end());
  pending_free_bf16_.clear();
}

void KvPageTable::Remove(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  SeqPages& s = it->second;
  free_bf16_.insert(free_bf16_.end(), s.bf16.begin(), s.bf16.end());
  free_int2_.insert(free_int2_.end(), s.int2.begin(), s.int2.end());
  used_bytes_ -= s.reserved_bytes;
  reserved_bf16_ -= s.reserved.bf16;
  reserved_int2_ -= s.reserved.int2;
  seqs_.erase(it);
}

}  // namespace oscarkv::model_gpu
