// Activation dumps: post-RoPE Q/K/V of one model run, written by lib/model (the model helper) and
// read by `oscarkv calibrate` and `oscarkv codecs report`.
//
// Format: a directory of NumPy .npy files (format 1.0, dtype '<f4', C order), one per layer and
// tensor, named layer_<l>_<q|k|v>.npy with l in decimal without padding (layer_0_q.npy):
//   q: [T, H_q, D]   k: [T, H_kv, D]   v: [T, H_kv, D]     float32
// K and V are post-RoPE (and post QK-norm where the model has it), unrotated. NumPy loads them
// with np.load(path); a single tensor file for `codecs report --tensor` is one such .npy.
#ifndef OSCARKV_LIB_QUANT_ACTIVATION_DUMP_H_
#define OSCARKV_LIB_QUANT_ACTIVATION_DUMP_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace oscarkv::quant {

// A float32 array with its shape (row-major).
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Writes `data` (product(shape) floats) as a .npy file. kInvalidArgument on a size mismatch,
// kPermissionDenied / kInternal on I/O errors.
absl::Status WriteNpy(const std::string& path, std::span<const int64_t> shape,
                      std::span<const float> data);
// Reads a '<f4' C-order .npy file. kNotFound if missing; kDataLoss when truncated or malformed;
// kUnimplemented for other dtypes, Fortran order or format versions other than 1.x/2.x.
absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

// One layer's activations. q is [tokens][q_heads][head_dim], k and v [tokens][kv_heads][head_dim].
struct LayerActivations {
  int tokens = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  std::vector<float> q;
  std::vector<float> k;
  std::vector<float> v;
};

// "<dir>/layer_<layer>_<which>.npy", which in {'q', 'k', 'v'}.
std::string ActivationPath(const std::string& dir, int layer, char which);
// Writes the three files of one layer (the directory must exist). kInvalidArgument on shape errors.
absl::Status WriteLayerActivations(const std::string& dir, int layer,
                                   const LayerActivations& activations);
// Reads and cross-checks the three files of one layer (same T and D, H_q a multiple of H_kv).
absl::StatusOr<LayerActivations> ReadLayerActivations(const std::string& dir, int layer);
// Number of consecutive layers 0..n-1 whose q file exists in `dir`.
int CountDumpedLayers(const std::string& dir);

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_ACTIVATION_DUMP_H_
