// Host-side bookkeeping of the GPU's paged three-tier KV cache: which physical pages each
// sequence owns, where the next token goes, which pages a decode step demotes, and the byte
// budget that admission checks. Pure C++ (no CUDA), so CI tests it without a GPU.
//
// Layout (ARCHITECTURE.md §4, kernels/attention/decode_attention.h): a page holds 8 consecutive
// tokens of one sequence for every layer and KV head (the device pools are [L][pages][Hkv][unit],
// so one page id addresses the same tokens in every layer). Two pools: BF16 pages (sink +
// recent, or every token for codec bf16) and INT2 pages (per-token history). The tier windows are
// those of lib/quant's ThreeTierCache (WindowsAt): after n tokens a windowed codec keeps tokens
// [0, S) and the last W..W+7 in BF16 and the 8-aligned middle in INT2; appending a token that
// makes the recent window W + 8 long demotes its oldest page.
//
// Thread-compatible.
#ifndef OSCARKV_LIB_MODEL_GPU_KV_PAGE_TABLE_H_
#define OSCARKV_LIB_MODEL_GPU_KV_PAGE_TABLE_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace oscarkv::model_gpu {

inline constexpr int kPageTokens = 8;

struct KvPageTableConfig {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // 64 or 128
  // Windowed per-token INT2 codec (sink/recent below) or all-BF16 (codec bf16).
  bool windowed = false;
  int sink_tokens = 64;     // multiple of 8; Default: 64
  int recent_tokens = 256;  // multiple of 8; Default: 256
  // Bytes of KV the admitted sequences may occupy (BF16 + INT2 pages, all layers).
  int64_t budget_bytes = 0;
  // Physical pages of each pool (the device allocates these); admission never exceeds them.
  int32_t bf16_pages = 0;
  int32_t int2_pages = 0;
};

// Bytes of one page (8 tokens, all layers and KV heads) of each pool.
int64_t Bf16PageBytes(const KvPageTableConfig& c);
int64_t Int2PageBytes(const KvPageTableConfig& c);

// Pages a sequence of `tokens` tokens occupies in each pool.
struct PageCount {
  int32_t bf16 = 0;
  int32_t int2 = 0;
};
PageCount PagesForTokens(const KvPageTableConfig& c, int64_t tokens);
// Pages a sequence of `tokens` tokens holds between steps (PagesForTokens is the peak a
// reservation must cover: the recent window briefly holds one more page before a demotion).
// Depends on the length only, however the sequence got there.
PageCount PagesHeld(const KvPageTableConfig& c, int64_t tokens);

// A sequence's KV pages packed into one contiguous buffer: the BF16 pages (sink then recent, or
// every page for codec bf16) as [layers][bf16_pages][bf16_chunk_bytes], then the INT2 history
// pages as [layers][int2_pages][int2_chunk_bytes]; a chunk is one page (8 tokens) of one layer,
// all KV heads, each head one page unit of kernels/attention's layout. The page counts follow
// from the length alone (PagesHeld), so the form is the same on every GPU running the same model
// and codec: what a prefill GPU sends a decode GPU, and what kvformat blocks convert to
// (block_import.h).
struct PackedKvLayout {
  int64_t length = 0;  // tokens
  int layers = 0;
  int32_t bf16_pages = 0, int2_pages = 0;
  int64_t bf16_chunk_bytes = 0, int2_chunk_bytes = 0;
  int64_t bf16_bytes() const { return int64_t{layers} * bf16_pages * bf16_chunk_bytes; }
  int64_t int2_bytes() const { return int64_t{layers} * int2_pages * int2_chunk_bytes; }
  int64_t bytes() const { return bf16_bytes() + int2_bytes(); }
};
PackedKvLayout PackedLayoutFor(const KvPageTableConfig& c, int64_t length);

// One sequence's pages, in token order within each tier.
struct SeqPages {
  int64_t length = 0;              // tokens stored
  std::vector<int32_t> bf16;       // sink pages, then recent pages (windowed) / all pages
  std::vector<int32_t> int2;       // history pages
  int32_t bf16_tokens = 0;         // tokens in the BF16 tier
  int32_t int2_tokens = 0;         // tokens in the INT2 tier
  int64_t reserved_bytes = 0;      // budget held for the sequence's final length
  PageCount reserved;              // pages held back for it
};

// Where each token of an append goes, and what it demotes. Page ids are physical ids.
struct AppendPlan {
  // BF16 rows written: token i of the append (absolute position pos0 + i) goes to
  // bf16_page[i], row bf16_row[i], unless it lands in history directly (prefill only).
  std::vector<int32_t> token_index;  // which tokens of the append are written as BF16 rows
  std::vector<int32_t> bf16_page;
  std::vector<int32_t> bf16_row;
  // Prefill only: tokens [hist_begin, hist_begin + 8 * hist_pages.size()) of the append go to
  // INT2 pages hist_pages (8 per page) straight away.
  int32_t hist_begin = 0;
  std::vector<int32_t> hist_pages;
  // Decode only: BF16 page demote_src (8 rows) is quantised into INT2 page demote_dst, then
  // freed (after the step).
  std::vector<int32_t> demote_src;
  std::vector<int32_t> demote_dst;
};

class KvPageTable {
 public:
  // kInvalidArgument for a config that cannot work.
  static absl::StatusOr<KvPageTable> Create(const KvPageTableConfig& config);

  const KvPageTableConfig& config() const { return config_; }

  // Admits sequence `id` for up to `max_tokens` tokens: reserves its budget and pages.
  // @return kResourceExhausted when it does not fit now (the caller retries after others
  //   finish); kInvalidArgument when it could never fit, or `id` is taken.
  absl::Status Admit(int64_t id, int64_t max_tokens);
  // Whether Admit(max_tokens) would succeed now.
  bool CanAdmit(int64_t max_tokens) const;

  // Plans the append of `n` tokens to `id` and updates the table (pages are taken from the
  // sequence's reservation). A prefill (sequence empty) places history rows straight into INT2
  // pages; a one-token decode append may demote one page. kOutOfRange past the reservation.
  absl::StatusOr<AppendPlan> Append(int64_t id, int64_t n);
  // Returns pages demoted by the last Append calls to the free list (call after the step ran).
  void ReleaseDemoted();

  // Frees every page and the budget of `id`.
  void Remove(int64_t id);

  const SeqPages& seq(int64_t id) const { return seqs_.at(id); }
  bool Has(int64_t id) const { return seqs_.count(id) != 0; }
  int64_t used_bytes() const { return used_bytes_; }
  int num_seqs() const { return static_cast<int>(seqs_.size()); }

 private:
  explicit KvPageTable(const KvPageTableConfig& c);
  int32_t TakeBf16(SeqPages& s);
  int32_t TakeInt2(SeqPages& s);

  KvPageTableConfig config_;
  std::vector<int32_t> free_bf16_, free_int2_;
  std::vector<int32_t> pending_free_bf16_;
  int64_t reserved_bf16_ = 0, reserved_int2_ = 0;  // pages held by reservations (incl. used)
  int64_t used_bytes_ = 0;                         // reserved bytes of admitted sequences
  std::map<int64_t, SeqPages> seqs_;
};

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_KV_PAGE_TABLE_H_
