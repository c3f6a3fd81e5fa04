// Matrix-vector products straight from ggml-quantized weights (Q4_1, Q8_0), for decode: reading
// 5-8.5 bits per weight instead of 32 makes the memory-bound decode step several times faster.
//
// The activation vector x is first quantized per 32-element block to int16 codes
// (QuantizedActivations: x[i] ~= d[b] * q[i], |error| <= d[b] / 2, d[b] = max |x| / 32767), and
// each weight block is multiplied in integers (AVX-512 VNNI `vpdpwssd`, or AVX-VNNI, or a scalar
// loop on other CPUs):
//   Q4_1 (w = d_w * c + m_w, c in [0, 15]):
//     sum_i w_i x_i ~= d_w * d_x * sum_i c_i q_i + m_w * sum_i x_i   (exact float block sum)
//   Q8_0 (w = d_w * c, c in [-128, 127]):
//     sum_i w_i x_i ~= d_w * d_x * sum_i c_i q_i
// The only approximation is x's rounding (the integer sums are exact), so the result is the
// float product of the dequantized weights within sum_b (d_x[b] / 2) * sum_{i in b} |w_i| plus
// float summation error.
// Why int16 and not llama.cpp's int8 (Q8_1 + vpdpbusd): SmolLM2's hidden states have outlier
// dimensions, so one block's int8 step swamps its other elements; with int8 activations decode
// differed from prefill by 10.5% of the logit range (model_test allows 0.5%) and flipped argmaxes,
// as llama.cpp itself differs from float32 transformers by ~1 logit (model_reference_test).
// int16 codes cost one widening per weight block and keep decode within the float tolerances.
//
// The rows are split over the shared CPU pool (thread_pool.h, RunOnCpuPool), whose size follows
// the OpenBLAS thread count (SetCpuThreads / --threads).
#ifndef OSCARKV_LIB_MODEL_QUANT_GEMV_H_
#define OSCARKV_LIB_MODEL_QUANT_GEMV_H_

#include <cstdint>
#include <span>
#include <vector>

namespace oscarkv::model {

// A weight matrix as stored in the GGUF file: `rows` rows of `cols` elements of ggml `type`.
struct QuantMatrix {
  uint32_t type = 0;              // GgmlType value; Default: 0
  const uint8_t* data = nullptr;  // into the file mapping; null when unavailable
  int64_t rows = 0;
  int64_t cols = 0;
};

// x quantized per 32-element block (like ggml's Q8_1, with int16 codes and float scales):
// x[i] ~= d[i / 32] * q[i].
struct QuantizedActivations {
  std::vector<int16_t> q;   // [n], in [-32767, 32767]
  std::vector<float> d;     // [n / 32]: max |x| over the block / 32767 (0 for an all-zero block)
  std::vector<float> sum;   // [n / 32]: the float sum of x over the block (Q4_1's min term)
};

// Fills `out` from x[n]; n must be a multiple of 32.
void QuantizeActivations(const float* x, int64_t n, QuantizedActivations* out);

// The integer dot-product implementations; all give the same result up to float summation order.
enum class DotKernel { kScalar, kAvxVnni, kAvx512Vnni };

// The fastest kernel this CPU runs (kAvx512Vnni > kAvxVnni > kScalar).
DotKernel BestDotKernel();
// Whether this CPU can run `k` (kScalar: always).
bool DotKernelAvailable(DotKernel k);

// y[r - r0] = row r of `m` times x, for r in [r0, r1), single-threaded, with kernel `k`
// (which must be available). Requires QuantGemvSupported(m) and x quantized from m.cols values.
void QuantDotRows(DotKernel k, const QuantMatrix& m, const QuantizedActivations& x, int64_t r0,
                  int64_t r1, float* y);

// y[t * y_stride + (r - r0)] = row r of `m` times xs[t], for every input t and r in [r0, r1),
// single-threaded. With kAvx512Vnni each weight block is read once for up to 8 inputs; every
// result equals QuantDotRows(k, m, xs[t], ...) bit for bit, for any kernel.
void QuantDotRowsMulti(DotKernel k, const QuantMatrix& m, std::span<const QuantizedActivations> xs,
                       int64_t r0, int64_t r1, float* y, int64_t y_stride);

// True when QuantGemv handles `m` (Q4_1 or Q8_0, cols a multiple of 32, data present).
bool QuantGemvSupported(const QuantMatrix& m);

// y[rows] = W x, x [cols]. Requires QuantGemvSupported(m). Thread-safe: concurrent callers share
// the pool one at a time and a caller that finds it busy computes alone.
void QuantGemv(const QuantMatrix& m, const float* x, float* y);

// ys[j][m_j.rows] = W_j x for matrices with the same cols (Q/K/V, gate/up): x is quantized once
// and all rows go to the pool in one job. Requires QuantGemvSupported for each; ms.size() ==
// ys.size(). Thread-safe as QuantGemv.
void QuantGemvMulti(std::span<const QuantMatrix* const> ms, const float* x,
                    std::span<float* const> ys);

// The same for `inputs` activation vectors (a decode batch): x is [inputs][cols] and ys[j] is
// [inputs][m_j.rows], row-major. Each weight block is read once for up to 8 inputs (AVX-512
// VNNI), and every output equals QuantGemvMulti on that input alone, bit for bit.
void QuantGemmMulti(std::span<const QuantMatrix* const> ms, const float* x, int64_t inputs,
                    std::span<float* const> ys);

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_QUANT_GEMV_H_
