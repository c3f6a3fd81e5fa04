#include "lib/model/dequantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/kvformat/float16.h"
#include "lib/model/gguf_file.h"

namespace oscarkv::model {
namespace {

using kvformat::Bf16BitsToFloat;
using kvformat::HalfBitsToFloat;

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfBitsToFloat(h);
}

// Q4_0: {fp16 d; u8 qs[16]}; x[j] = d * (lo(qs[j]) - 8), x[j + 16] = d * (hi(qs[j]) - 8).
void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * (static_cast<int>(qs[j] & 0xF) - 8);
    y[j + 16] = d * (static_cast<int>(qs[j] >> 4) - 8);
  }
}

// Q4_1: {fp16 d; fp16 m; u8 qs[16]}; x = d * q + m, same nibble order as Q4_0.
void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * (qs[j] & 0xF) + m;
    y[j + 16] = d * (qs[j] >> 4) + m;
  }
}

// Q8_0: {fp16 d; i8 qs[32]}; x = d * q.
void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * qs[j];
}

// The 12 scale bytes of Q4_K/Q5_K pack eight 6-bit scales and eight 6-bit mins.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K: {fp16 d; fp16 dmin; u8 scales[12]; u8 qs[128]}. Eight sub-blocks of 32; each 64-element
// chunk uses 32 bytes: low nibbles for the first 32, high nibbles for the next 32.
// x = d * sc * q - dmin * m.
void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// Q5_K: {fp16 d; fp16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}; as Q4_K with a fifth bit
// from qh: bit (2c) for the low-nibble half of chunk c, bit (2c+1) for the high half.
void DequantQ5_K(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; fp16 d}; 6-bit quants q in [0, 63], x = d *
// scale * (q - 32), scales per 16 elements. Two 128-element halves; in each, element
// l + 32k (k = 0..3, l < 32) takes its low 4 bits from ql[l + 32 (k & 1)] (low nibble for
// k < 2, high for k >= 2) and its top 2 bits from qh[l] >> 2k.
void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

bool CanDequantize(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

absl::Status Dequantize(uint32_t type, const void* data, size_t data_bytes, int64_t num_elements,
                        float* out) {
  if (!CanDequantize(type)) {
    return absl::UnimplementedError(
        absl::StrCat("dequantization of ggml type ", GgmlTypeName(type), " is not supported"));
  }
  int64_t be = 0, bb = 0;
  GgmlBlockInfo(type, &be, &bb);
  if (num_elements < 0 || num_elements % be != 0) {
    return absl::InvalidArgumentError(absl::StrCat(num_elements, " elements is not a multiple of the ",
                                                   GgmlTypeName(type), " block size ", be));
  }
  const int64_t blocks = num_elements / be;
  if (static_cast<uint64_t>(blocks * bb) > data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(GgmlTypeName(type), " data of ", data_bytes,
                                                   " bytes is shorter than the ", blocks * bb,
                                                   " bytes ", num_elements, " elements need"));
  }
  const uint8_t* p = static_cast<const uint8_t*>(data);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(out, p, num_elements * 4);
      break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < num_elements; ++i) out[i] = Half(p + 2 * i);
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < num_elements; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = Bf16BitsToFloat(h);
      }
      break;
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < blocks; ++b) DequantQ4_0(p + b * bb, out + b * be);
      break;
    case GgmlType::kQ4_1:
      for (int64_t b = 0; b < blocks; ++b) DequantQ4_1(p + b * bb, out + b * be);
      break;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < blocks; ++b) DequantQ8_0(p + b * bb, out + b * be);
      break;
    case GgmlType::kQ4_K:
      for (int64_t b = 0; b < blocks; ++b) DequantQ4_K(p + b * bb, out + b * be);
      break;
    case GgmlType::kQ5_K:
      for (int64_t b = 0; b < blocks; ++b) DequantQ5_K(p + b * bb, out + b * be);
      break;
    case GgmlType::kQ6_K:
      for (int64_t b = 0; b < blocks; ++b) DequantQ6_K(p + b * bb, out + b * be);
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

}  // namespace oscarkv::model
