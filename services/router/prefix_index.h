// PrefixIndex: an approximate map from block keys to the holders that have them (decode/prefill
// workers, and the kvstore as one shared holder). Block keys chain over the prompt's tokens
// (lib/kvformat/block_key.h), so a holder's usable prefix for a request is the number of the
// request's leading keys it holds, stopped at the first miss.
//
// Approximate by design: holders report what they stored and evicted (heartbeats, kvstore
// events); reports may be late or lost, and each holder keeps at most `max_keys_per_holder`
// keys (oldest reported dropped first). A wrong answer costs only a worse placement: workers
// re-check keys before using any block.
//
// Thread-safe: one internal mutex.
#ifndef OSCARKV_SERVICES_ROUTER_PREFIX_INDEX_H_
#define OSCARKV_SERVICES_ROUTER_PREFIX_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::router {

struct BlockKeyHash {
  // Keys are already uniform hashes; mixing the halves is enough.
  size_t operator()(const kvformat::BlockKey& k) const {
    return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull));
  }
};

class PrefixIndex {
 public:
  // `max_keys_per_holder` >= 1 bounds memory: 16 bytes plus set overhead per key.
  explicit PrefixIndex(size_t max_keys_per_holder = 1 << 20);

  //! `holder` now has `keys` (re-adding a known key is a no-op).
  void Add(const std::string& holder, std::span<const kvformat::BlockKey> keys);
  //! `holder` no longer has `keys` (evicted); unknown keys are ignored.
  void Remove(const std::string& holder, std::span<const kvformat::BlockKey> keys);
  //! Forgets everything about `holder` (it died or restarted with an empty cache).
  void Clear(const std::string& holder);

  //! Number of leading `keys` that `holder` has, stopping at the first miss.
  int MatchedBlocks(const std::string& holder, std::span<const kvformat::BlockKey> keys) const;
  //! MatchedBlocks for every holder with a non-zero match.
  std::map<std::string, int> MatchAll(std::span<const kvformat::BlockKey> keys) const;
  //! Keys currently indexed for `holder`.
  size_t HolderSize(const std::string& holder) const;

 private:
  struct Holder {
    absl::flat_hash_set<kvformat::BlockKey, BlockKeyHash> keys;
    std::deque<kvformat::BlockKey> order;  // insertion order, may hold removed keys (lazy)
  };
  static int Match(const Holder& h, std::span<const kvformat::BlockKey> keys);

  const size_t max_keys_per_holder_;
  mutable absl::Mutex mu_;
  std::map<std::string, Holder> holders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace oscarkv::router

#endif  // OSCARKV_SERVICES_ROUTER_PREFIX_INDEX_H_
