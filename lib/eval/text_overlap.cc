#include "lib/eval/text_overlap.h"

#include <algorithm>

#include "xxhash.h"

namespace oscarkv::eval {

uint64_t ContentHash(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::vector<uint64_t> ShingleSet(std::span<const int32_t> tokens, int n) {
  std::vector<uint64_t> out;
  if (static_cast<int>(tokens.size()) < n) return out;
  out.reserve(tokens.size() - n + 1);
  for (size_t i = 0; i + n <= tokens.size(); ++i) {
    out.push_back(XXH3_64bits(tokens.data() + i, sizeof(int32_t) * n));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double OverlapFraction(std::span<const int32_t> tokens, std::span<const uint64_t> set, int n) {
  if (static_cast<int>(tokens.size()) < n) return 0.0;
  int64_t hit = 0, total = 0;
  for (size_t i = 0; i + n <= tokens.size(); ++i, ++total) {
    const uint64_t h = XXH3_64bits(tokens.data() + i, sizeof(int32_t) * n);
    if (std::binary_search(set.begin(), set.end(), h)) ++hit;
  }
  return static_cast<double>(hit) / static_cast<double>(total);
}

}  // namespace oscarkv::eval
