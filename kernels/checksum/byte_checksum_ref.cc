#include "kernels/checksum/byte_checksum.h"

#include <cstring>

namespace oscarkv::kernels {

uint64_t ByteChecksumRef(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  const size_t words = bytes / 8;
  uint64_t sum = 0;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = 0;
    for (int b = 7; b >= 0; --b) w = (w << 8) | p[8 * i + b];  // little-endian on any host
    sum += ByteChecksumTerm(w, i);
  }
  if (const size_t tail = bytes % 8; tail != 0) {
    uint64_t w = 0;
    for (int b = static_cast<int>(tail) - 1; b >= 0; --b) w = (w << 8) | p[8 * words + b];
    sum += ByteChecksumTerm(w, words);
  }
  return ByteChecksumFinish(sum, bytes);
}

}  // namespace oscarkv::kernels
