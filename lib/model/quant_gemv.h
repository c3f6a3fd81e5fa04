// Matrix-vector products straight from ggml-quantized weights (Q4_1, Q8_0), for decode: reading
// 5-8.5 bits per weight instead of 32 makes the memory-bound decode step several times faster.
// The result equals the float32 product of the dequantized weights up to summation order.
#ifndef OSCARKV_LIB_MODEL_QUANT_GEMV_H_
#define OSCARKV_LIB_MODEL_QUANT_GEMV_H_

#include <cstdint>

namespace oscarkv::model {

// A weight matrix as stored in the GGUF file: `rows` rows of `cols` elements of ggml `type`.
struct QuantMatrix {
  uint32_t type = 0;              // GgmlType value; Default: 0
  const uint8_t* data = nullptr;  // into the file mapping; null when unavailable
  int64_t rows = 0;
  int64_t cols = 0;
};

// True when QuantGemv handles `m` on this CPU (Q4_1 or Q8_0, AVX-512F present).
bool QuantGemvSupported(const QuantMatrix& m);

// y[rows] = W x, x [cols]. Requires QuantGemvSupported(m).
void QuantGemv(const QuantMatrix& m, const float* x, float* y);

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_QUANT_GEMV_H_
