// OSCAR calibration (quant.md A.2, A.3): covariances of post-RoPE Q/K/V per layer (float64,
// streamed in chunks), symmetric eigendecomposition, R = U * H * P_br, and the calibration file
// that carries R_K / R_V per layer to the codecs.
//
// Covariance targets, for one layer with H_q query heads, H_kv KV heads, g = H_q / H_kv (query
// heads h*g .. (h+1)*g-1 read KV head h), n tokens:
//   qqt: C_Q = (1/H_kv) sum_h Q_h^T Q_h / (n g)          Q_h = rows of the g query heads of group h
//   sst: C_Qh = Q_h^T Q_h / (n g); w_t = k_{h,t} C_Qh k_{h,t}^T normalised to mean 1 over t;
//        C_V = (1/H_kv) sum_h sum_t w_t v_{h,t}^T v_{h,t} / n      (the code's version, A.2)
//   ktk: (1/H_kv) sum_h K_h^T K_h / n       vtv: (1/H_kv) sum_h V_h^T V_h / n   (M5)
// sst needs the final C_Qh before it can weight any token, so accumulation has two passes over
// the same tokens: pass 1 (Q, K, V) then pass 2 (K, V).
//
// Rotation (code version of A.3): U = eigenvectors of C in ASCENDING eigenvalue order (as
// torch.linalg.eigh / Eigen's SelfAdjointEigenSolver return them), fed into H unchanged;
// sorted = argsort(eigenvalues, descending, stable); perm[br(i)] = sorted[i]; P = I[:, perm];
// R = U * H_d * P (row-vector convention: k~ = k * R). Each eigenvector's sign is fixed so that
// its largest-magnitude entry (first on ties) is positive, which makes R reproducible across
// eigen solvers (any sign choice gives a valid rotation).
#ifndef OSCARKV_LIB_QUANT_CALIBRATION_H_
#define OSCARKV_LIB_QUANT_CALIBRATION_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace oscarkv::quant {

// Covariances of one layer, each [D][D] float64 row-major, symmetrized ((C + C^T) / 2).
struct LayerCovariances {
  int head_dim = 0;
  int64_t tokens = 0;          // tokens seen in pass 1
  std::vector<double> qqt;     // C_Q
  std::vector<double> sst;     // C_V (empty when pass 2 was not run)
  std::vector<double> ktk;
  std::vector<double> vtv;
};

// Streams one layer's activations into float64 accumulators. Not thread-safe.
class CovarianceAccumulator {
 public:
  // kInvalidArgument unless head_dim > 0, kv_heads > 0 and q_heads a positive multiple of kv_heads.
  static absl::StatusOr<CovarianceAccumulator> Create(int q_heads, int kv_heads, int head_dim);

  // Pass 1: q [tokens, q_heads, D], k and v [tokens, kv_heads, D], f32, contiguous.
  // kInvalidArgument on a size mismatch; kFailedPrecondition once pass 2 has started.
  absl::Status AddPass1(std::span<const float> q, std::span<const float> k,
                        std::span<const float> v, int tokens);
  // Pass 2 (for sst): the same tokens' k and v again, in any chunking. The first call freezes
  // pass 1. kFailedPrecondition before any pass-1 token.
  absl::Status AddPass2(std::span<const float> k, std::span<const float> v, int tokens);
  // Final covariances. sst is filled only when pass 2 saw exactly the pass-1 token count
  // (kFailedPrecondition when pass 2 ran with a different count, or pass 1 saw no token).
  absl::StatusOr<LayerCovariances> Finish() const;

  int64_t pass1_tokens() const { return pass1_tokens_; }
  int64_t pass2_tokens() const { return pass2_tokens_; }

 private:
  CovarianceAccumulator(int q_heads, int kv_heads, int head_dim);

  int q_heads_;
  int kv_heads_;
  int head_dim_;
  int64_t pass1_tokens_ = 0;
  int64_t pass2_tokens_ = 0;
  std::vector<double> qtq_;      // [kv_heads][D][D] per-group sum of q^T q
  std::vector<double> ktk_;      // [D][D] sum over heads
  std::vector<double> vtv_;      // [D][D]
  std::vector<double> cqh_;      // [kv_heads][D][D] frozen C_Qh for pass 2
  std::vector<double> wvtv_;     // [kv_heads][D][D] sum_t w_t v^T v (raw weights)
  std::vector<double> wsum_;     // [kv_heads] sum_t w_t
};

// An orthogonal rotation built from one covariance.
struct RotationResult {
  std::vector<double> rotation;     // [D][D] row-major, R = U * H * P_br
  std::vector<double> eigenvalues;  // [D] ascending
};
// kInvalidArgument unless D is a power of two and cov has D*D finite entries.
absl::StatusOr<RotationResult> BuildRotation(std::span<const double> covariance, int head_dim);

// ---- Calibration file ----
// Version-1 layout, little-endian, no padding:
//   char[8]  magic "OKVCALIB"
//   u32      version (1)
//   u32      layers L (> 0)
//   u32      head_dim D (power of two, <= 1024)
//   f32      k_clip_ratio, f32 v_clip_ratio      (in (0, 1])
//   u64      model_fingerprint (XXH3-64 of the model identity; 0 = unspecified)
//   u64      calibration tokens
//   u16 len + bytes   k_objective ("qqt" | "ktk" | "hadamard"), then the same for v_objective
//   per layer l = 0..L-1:  f32 R_K[D][D], f32 eig_K[D], f32 R_V[D][D], f32 eig_V[D]
//   u64      XXH3-64 (seed 0) of every byte before it
struct CalibrationLayer {
  std::vector<float> k_rotation;     // [D][D] row-major, k~ = k * R_K (also q~ = q * R_K)
  std::vector<float> k_eigenvalues;  // [D] ascending
  std::vector<float> v_rotation;     // [D][D], v~ = v * R_V; outputs un-rotate with R_V^T
  std::vector<float> v_eigenvalues;  // [D]
};
struct Calibration {
  uint64_t model_fingerprint = 0;
  int head_dim = 0;
  float k_clip_ratio = 0.96f;
  float v_clip_ratio = 0.92f;
  uint64_t tokens = 0;
  std::string k_objective;  // "qqt" (oscar) or "ktk" (oscar-gram)
  std::string v_objective;  // "sst" (oscar) or "vtv" (oscar-gram)
  std::vector<CalibrationLayer> layers;
};

inline constexpr uint32_t kCalibrationVersion = 1;

// Checks shapes, finiteness, clip ratios and orthogonality (max |R R^T - I| <= 1e-4).
// kInvalidArgument naming the first problem.
absl::Status ValidateCalibration(const Calibration& calibration);
// Serializes a valid calibration (kInvalidArgument otherwise). Deterministic: equal inputs give
// byte-identical output.
absl::StatusOr<std::string> SerializeCalibration(const Calibration& calibration);
// Parses and validates. kDataLoss on truncation, bad magic or checksum mismatch;
// kUnimplemented on an unknown version; kInvalidArgument on bad shapes or values.
absl::StatusOr<Calibration> ParseCalibration(std::string_view bytes);
// File wrappers; kNotFound / kPermissionDenied / kInternal for I/O errors, plus Parse's codes.
absl::Status WriteCalibrationFile(const std::string& path, const Calibration& calibration);
absl::StatusOr<Calibration> ReadCalibrationFile(const std::string& path);
// XXH3-64 of the serialized file: the block header's calib_fingerprint.
uint64_t CalibrationFingerprint(std::string_view serialized);

// Builds a calibration from per-layer covariances with the given objectives (k: "qqt" | "ktk",
// v: "sst" | "vtv"). kInvalidArgument on an unknown objective, a missing covariance (sst without
// pass 2) or mismatched head dims.
absl::StatusOr<Calibration> CalibrateFromCovariances(std::span<const LayerCovariances> layers,
                                                     std::string_view k_objective,
                                                     std::string_view v_objective,
                                                     uint64_t model_fingerprint,
                                                     float k_clip_ratio, float v_clip_ratio);

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_CALIBRATION_H_
