// Dequantization of ggml tensor data to float32, written from ggml's block definitions
// (ggml-common.h): F32, F16, BF16, Q8_0, Q4_0, Q4_1 (32-element blocks) and Q4_K, Q5_K, Q6_K
// (256-element super-blocks). Pure functions, thread-safe.
#ifndef OSCARKV_LIB_MODEL_DEQUANTIZE_H_
#define OSCARKV_LIB_MODEL_DEQUANTIZE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace oscarkv::model {

// Writes `num_elements` floats to `out` from `data` (`data_bytes` long) of ggml type `type`.
// @return kInvalidArgument when num_elements is not a whole number of blocks or the data is
//   shorter than the blocks need; kUnimplemented for a type we do not dequantize (named).
absl::Status Dequantize(uint32_t type, const void* data, size_t data_bytes, int64_t num_elements,
                        float* out);

// True when Dequantize supports `type`.
bool CanDequantize(uint32_t type);

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_DEQUANTIZE_H_
