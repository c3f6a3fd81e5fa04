#include "lib/quant/calibration.h"

#include <xxhash.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/quant/hadamard.h"

namespace oscarkv::quant {
namespace {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr char kMagic[8] = {'O', 'K', 'V', 'C', 'A', 'L', 'I', 'B'};
constexpr int kMaxHeadDim = 1024;
constexpr double kOrthoTolerance = 1e-4;

// Rows [row0, row0 + rows) x cols of a [tokens, heads, D] tensor's head `h`, widened to double.
RowMatrixXd HeadRows(std::span<const float> x, int tokens, int heads, int d, int h) {
  RowMatrixXd m(tokens, d);
  for (int t = 0; t < tokens; ++t) {
    const float* src = x.data() + (static_cast<size_t>(t) * heads + h) * d;
    for (int i = 0; i < d; ++i) m(t, i) = src[i];
  }
  return m;
}

// Eigen splits a product's inner dimension by the cache sizes it reads from the CPU, so the same
// sums of 2048 tokens were grouped differently on an Intel Xeon than on an AMD EPYC and a few
// rotation entries differed in the last bit (docs/DECISIONS.md 2026-12-07). Fixed sizes (those
// Eigen reads on that EPYC) give every machine the same grouping. Called before any product here;
// the first call sets them (thread-safe static); no other file multiplies Eigen matrices.
void UseFixedEigenBlocking() {
  static const bool fixed = [] {
    Eigen::setCpuCacheSizes(std::ptrdiff_t{32} << 10, std::ptrdiff_t{512} << 10,
                            std::ptrdiff_t{256} << 20);
    return true;
  }();
  (void)fixed;
}

void AddGram(const RowMatrixXd& x, double* acc, int d) {
  Eigen::Map<RowMatrixXd> a(acc, d, d);
  a.noalias() += x.transpose() * x;
}

std::vector<double> Symmetrize(const std::vector<double>& c, int d, double scale) {
  std::vector<double> out(c.size());
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) {
      out[static_cast<size_t>(i) * d + j] =
          0.5 * (c[static_cast<size_t>(i) * d + j] + c[static_cast<size_t>(j) * d + i]) * scale;
    }
  }
  return out;
}

// ---- Little-endian writer / reader ----
class Writer {
 public:
  void Bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  template <typename T>
  void Le(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    if constexpr (std::endian::native == std::endian::big) std::reverse(b, b + sizeof(T));
    Bytes(b, sizeof(T));
  }
  void Str(std::string_view s) {
    Le<uint16_t>(static_cast<uint16_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  void Floats(const std::vector<float>& v) {
    for (float f : v) Le<float>(f);
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  absl::Status Le(T* v, std::string_view what) {
    if (in_.size() - pos_ < sizeof(T)) return Truncated(what);
    unsigned char b[sizeof(T)];
    std::memcpy(b, in_.data() + pos_, sizeof(T));
    if constexpr (std::endian::native == std::endian::big) std::reverse(b, b + sizeof(T));
    std::memcpy(v, b, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status Str(std::string* s, std::string_view what) {
    uint16_t n = 0;
    OSCARKV_RETURN_IF_ERROR(Le(&n, what));
    if (in_.size() - pos_ < n) return Truncated(what);
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  absl::Status Floats(std::vector<float>* v, size_t n, std::string_view what) {
    if ((in_.size() - pos_) / 4 < n) return Truncated(what);
    v->resize(n);
    for (size_t i = 0; i < n; ++i) OSCARKV_RETURN_IF_ERROR(Le(&(*v)[i], what));
    return absl::OkStatus();
  }
  size_t pos() const { return pos_; }

 private:
  absl::Status Truncated(std::string_view what) const {
    return absl::DataLossError(absl::StrCat("calibration file truncated while reading ",
                                            std::string(what), " at byte ", pos_, " of ",
                                            in_.size()));
  }
  std::string_view in_;
  size_t pos_ = 0;
};

absl::Status CheckRotation(const std::vector<float>& r, int d, const std::string& what) {
  UseFixedEigenBlocking();
  if (r.size() != static_cast<size_t>(d) * d) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", r.size(), " entries, want ", d, "x", d));
  }
  for (float v : r) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError(what + " has a non-finite entry");
  }
  Eigen::Map<const RowMatrixXf> m(r.data(), d, d);
  const Eigen::MatrixXd g = m.cast<double>() * m.cast<double>().transpose();
  const double err = (g - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff();
  if (!(err <= kOrthoTolerance)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not orthogonal: max |R R^T - I| = ", err));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- CovarianceAccumulator ----

CovarianceAccumulator::CovarianceAccumulator(int q_heads, int kv_heads, int head_dim)
    : q_heads_(q_heads), kv_heads_(kv_heads), head_dim_(head_dim) {
  UseFixedEigenBlocking();
  const size_t dd = static_cast<size_t>(head_dim) * head_dim;
  qtq_.assign(dd * kv_heads, 0.0);
  ktk_.assign(dd, 0.0);
  vtv_.assign(dd, 0.0);
  wvtv_.assign(dd * kv_heads, 0.0);
  wsum_.assign(kv_heads, 0.0);
}

absl::StatusOr<CovarianceAccumulator> CovarianceAccumulator::Create(int q_heads, int kv_heads,
                                                                    int head_dim) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim || kv_heads <= 0 || q_heads <= 0 ||
      q_heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad calibration shape: q_heads ", q_heads,
                                                   ", kv_heads ", kv_heads, ", head_dim ",
                                                   head_dim));
  }
  return CovarianceAccumulator(q_heads, kv_heads, head_dim);
}

absl::Status CovarianceAccumulator::AddPass1(std::span<const float> q, std::span<const float> k,
                                             std::span<const float> v, int tokens) {
  if (pass2_tokens_ > 0 || !cqh_.empty()) {
    return absl::FailedPreconditionError("pass 1 chunk after pass 2 started");
  }
  const size_t t = static_cast<size_t>(tokens);
  const size_t d = static_cast<size_t>(head_dim_);
  if (tokens <= 0 || q.size() != t * q_heads_ * d || k.size() != t * kv_heads_ * d ||
      v.size() != t * kv_heads_ * d) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pass 1 chunk sizes q ", q.size(), " k ", k.size(), " v ", v.size(), " do not match ",
        tokens, " tokens x (", q_heads_, ", ", kv_heads_, ") heads x ", head_dim_));
  }
  const int g = q_heads_ / kv_heads_;
  for (int qh = 0; qh < q_heads_; ++qh) {
    AddGram(HeadRows(q, tokens, q_heads_, head_dim_, qh), &qtq_[(qh / g) * d * d], head_dim_);
  }
  for (int h = 0; h < kv_heads_; ++h) {
    AddGram(HeadRows(k, tokens, kv_heads_, head_dim_, h), ktk_.data(), head_dim_);
    AddGram(HeadRows(v, tokens, kv_heads_, head_dim_, h), vtv_.data(), head_dim_);
  }
  pass1_tokens_ += tokens;
  return absl::OkStatus();
}

absl::Status CovarianceAccumulator::AddPass2(std::span<const float> k, std::span<const float> v,
                                             int tokens) {
  if (pass1_tokens_ == 0) return absl::FailedPreconditionError("pass 2 before any pass-1 token");
  const size_t t = static_cast<size_t>(tokens);
  const size_t d = static_cast<size_t>(head_dim_);
  if (tokens <= 0 || k.size() != t * kv_heads_ * d || v.size() != t * kv_heads_ * d) {
    return absl::InvalidArgumentError(absl::StrCat("pass 2 chunk sizes k ", k.size(), " v ",
                                                   v.size(), " do not match ", tokens,
                                                   " tokens x ", kv_heads_, " heads x ", d));
  }
  const int g = q_heads_ / kv_heads_;
  if (cqh_.empty()) {
    cqh_.resize(qtq_.size());
    const double scale = 1.0 / (static_cast<double>(pass1_tokens_) * g);
    for (int h = 0; h < kv_heads_; ++h) {
      std::vector<double> one(qtq_.begin() + h * d * d, qtq_.begin() + (h + 1) * d * d);
      const std::vector<double> c = Symmetrize(one, head_dim_, scale);
      std::copy(c.begin(), c.end(), cqh_.begin() + h * d * d);
    }
  }
  for (int h = 0; h < kv_heads_; ++h) {
    const RowMatrixXd kh = HeadRows(k, tokens, kv_heads_, head_dim_, h);
    const RowMatrixXd vh = HeadRows(v, tokens, kv_heads_, head_dim_, h);
    Eigen::Map<const RowMatrixXd> c(&cqh_[h * d * d], head_dim_, head_dim_);
    // w_t = k_t C_Qh k_t^T: expected squared raw logit of token t over the group's queries.
    const Eigen::VectorXd w = ((kh * c).array() * kh.array()).rowwise().sum();
    wsum_[h] += w.sum();
    Eigen::Map<RowMatrixXd> acc(&wvtv_[h * d * d], head_dim_, head_dim_);
    const RowMatrixXd wv = vh.array().colwise() * w.array();
    acc.noalias() += wv.transpose() * vh;
  }
  pass2_tokens_ += tokens;
  return absl::OkStatus();
}

absl::StatusOr<LayerCovariances> CovarianceAccumulator::Finish() const {
  if (pass1_tokens_ == 0) return absl::FailedPreconditionError("no calibration tokens");
  if (pass2_tokens_ != 0 && pass2_tokens_ != pass1_tokens_) {
    return absl::FailedPreconditionError(absl::StrCat("pass 2 saw ", pass2_tokens_,
                                                      " tokens, pass 1 saw ", pass1_tokens_));
  }
  const size_t d = static_cast<size_t>(head_dim_);
  const int g = q_heads_ / kv_heads_;
  LayerCovariances out;
  out.head_dim = head_dim_;
  out.tokens = pass1_tokens_;
  const double n = static_cast<double>(pass1_tokens_);
  std::vector<double> q_sum(d * d, 0.0);
  for (int h = 0; h < kv_heads_; ++h) {
    for (size_t i = 0; i < d * d; ++i) q_sum[i] += qtq_[h * d * d + i];
  }
  out.qqt = Symmetrize(q_sum, head_dim_, 1.0 / (kv_heads_ * n * g));
  out.ktk = Symmetrize(ktk_, head_dim_, 1.0 / (kv_heads_ * n));
  out.vtv = Symmetrize(vtv_, head_dim_, 1.0 / (kv_heads_ * n));
  if (pass2_tokens_ == pass1_tokens_) {
    // C_Vh = sum_t w'_t v^T v / n with w' = w n / sum w, i.e. sum_t w_t v^T v / sum_t w_t.
    std::vector<double> v_sum(d * d, 0.0);
    for (int h = 0; h < kv_heads_; ++h) {
      const double inv = wsum_[h] > 0.0 ? 1.0 / wsum_[h] : 0.0;
      for (size_t i = 0; i < d * d; ++i) v_sum[i] += wvtv_[h * d * d + i] * inv;
    }
    out.sst = Symmetrize(v_sum, head_dim_, 1.0 / kv_heads_);
  }
  return out;
}

// ---- Rotation ----

absl::StatusOr<RotationResult> BuildRotation(std::span<const double> covariance, int head_dim) {
  UseFixedEigenBlocking();
  const int d = head_dim;
  if (!IsPowerOfTwo(d) || d > kMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", d, " is not a power of two"));
  }
  if (covariance.size() != static_cast<size_t>(d) * d) {
    return absl::InvalidArgumentError(
        absl::StrCat("covariance has ", covariance.size(), " entries, want ", d * d));
  }
  for (double v : covariance) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError("covariance has a non-finite entry");
  }
  Eigen::Map<const RowMatrixXd> c(covariance.data(), d, d);
  const Eigen::MatrixXd sym = 0.5 * (c + c.transpose());
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(sym);
  if (solver.info() != Eigen::Success) {
    return absl::InternalError("symmetric eigendecomposition did not converge");
  }
  Eigen::MatrixXd u = solver.eigenvectors();  // columns, ascending eigenvalues
  const Eigen::VectorXd lambda = solver.eigenvalues();
  for (int j = 0; j < d; ++j) {
    int arg = 0;
    for (int i = 1; i < d; ++i) {
      if (std::fabs(u(i, j)) > std::fabs(u(arg, j))) arg = i;
    }
    if (u(arg, j) < 0) u.col(j) = -u.col(j);
  }
  const std::vector<double> h_vec = HadamardMatrix(d);
  Eigen::Map<const RowMatrixXd> h(h_vec.data(), d, d);
  const Eigen::MatrixXd uh = u * h;
  std::vector<int> sorted(d);
  std::iota(sorted.begin(), sorted.end(), 0);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](int a, int b) { return lambda(a) > lambda(b); });
  const std::vector<int> br = BitReversalPermutation(d);
  std::vector<int> perm(d);
  for (int i = 0; i < d; ++i) perm[br[i]] = sorted[i];
  RotationResult out;
  out.rotation.resize(static_cast<size_t>(d) * d);
  out.eigenvalues.resize(d);
  for (int i = 0; i < d; ++i) {
    out.eigenvalues[i] = lambda(i);
    for (int j = 0; j < d; ++j) out.rotation[static_cast<size_t>(i) * d + j] = uh(i, perm[j]);
  }
  return out;
}

// ---- Calibration file ----

absl::Status ValidateCalibration(const Calibration& cal) {
  const int d = cal.head_dim;
  if (!IsPowerOfTwo(d) || d > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration head_dim ", d, " is not a power of two <= ", kMaxHeadDim));
  }
  if (cal.layers.empty()) return absl::InvalidArgumentError("calibration has no layers");
  if (!(cal.k_clip_ratio > 0.0f && cal.k_clip_ratio <= 1.0f) ||
      !(cal.v_clip_ratio > 0.0f && cal.v_clip_ratio <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("clip ratios must be in (0, 1], got K ",
                                                   cal.k_clip_ratio, " V ", cal.v_clip_ratio));
  }
  if (cal.k_objective.size() > 64 || cal.v_objective.size() > 64) {
    return absl::InvalidArgumentError("objective names longer than 64 bytes");
  }
  for (size_t l = 0; l < cal.layers.size(); ++l) {
    const CalibrationLayer& layer = cal.layers[l];
    OSCARKV_RETURN_IF_ERROR(CheckRotation(layer.k_rotation, d, absl::StrCat("layer ", l, " R_K")));
    OSCARKV_RETURN_IF_ERROR(CheckRotation(layer.v_rotation, d, absl::StrCat("layer ", l, " R_V")));
    if (layer.k_eigenvalues.size() != static_cast<size_t>(d) ||
        layer.v_eigenvalues.size() != static_cast<size_t>(d)) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, " eigenvalues: want ", d));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SerializeCalibration(const Calibration& cal) {
  OSCARKV_RETURN_IF_ERROR(ValidateCalibration(cal));
  Writer w;
  w.Bytes(kMagic, sizeof(kMagic));
  w.Le<uint32_t>(kCalibrationVersion);
  w.Le<uint32_t>(static_cast<uint32_t>(cal.layers.size()));
  w.Le<uint32_t>(static_cast<uint32_t>(cal.head_dim));
  w.Le<float>(cal.k_clip_ratio);
  w.Le<float>(cal.v_clip_ratio);
  w.Le<uint64_t>(cal.model_fingerprint);
  w.Le<uint64_t>(cal.tokens);
  w.Str(cal.k_objective);
  w.Str(cal.v_objective);
  for (const CalibrationLayer& layer : cal.layers) {
    w.Floats(layer.k_rotation);
    w.Floats(layer.k_eigenvalues);
    w.Floats(layer.v_rotation);
    w.Floats(layer.v_eigenvalues);
  }
  w.Le<uint64_t>(XXH3_64bits(w.str().data(), w.str().size()));
  return std::move(w.str());
}

absl::StatusOr<Calibration> ParseCalibration(std::string_view bytes) {
  if (bytes.size() < sizeof(kMagic) + 8) {
    return absl::DataLossError(
        absl::StrCat("calibration file truncated: ", bytes.size(), " bytes"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not a calibration file (bad magic)");
  }
  // Checksum first: any later failure on a corrupted file reports the corruption itself.
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  Reader tail(bytes.substr(bytes.size() - 8));
  uint64_t stored = 0;
  OSCARKV_RETURN_IF_ERROR(tail.Le(&stored, "checksum"));
  Reader r(body);
  Calibration cal;
  char magic[8];
  for (char& c : magic) OSCARKV_RETURN_IF_ERROR(r.Le(&c, "magic"));
  uint32_t version = 0, layers = 0, head_dim = 0;
  OSCARKV_RETURN_IF_ERROR(r.Le(&version, "version"));
  if (version != kCalibrationVersion) {
    return absl::UnimplementedError(absl::StrCat("calibration file version ", version,
                                                 ", this build reads ", kCalibrationVersion));
  }
  if (XXH3_64bits(body.data(), body.size()) != stored) {
    return absl::DataLossError("calibration file checksum mismatch (corrupted or truncated)");
  }
  OSCARKV_RETURN_IF_ERROR(r.Le(&layers, "layers"));
  OSCARKV_RETURN_IF_ERROR(r.Le(&head_dim, "head_dim"));
  if (!IsPowerOfTwo(static_cast<int>(std::min<uint32_t>(head_dim, 1u << 30))) ||
      head_dim > kMaxHeadDim || layers == 0 || layers > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration shape: layers ", layers, ", head_dim ", head_dim));
  }
  cal.head_dim = static_cast<int>(head_dim);
  OSCARKV_RETURN_IF_ERROR(r.Le(&cal.k_clip_ratio, "k_clip_ratio"));
  OSCARKV_RETURN_IF_ERROR(r.Le(&cal.v_clip_ratio, "v_clip_ratio"));
  OSCARKV_RETURN_IF_ERROR(r.Le(&cal.model_fingerprint, "model_fingerprint"));
  OSCARKV_RETURN_IF_ERROR(r.Le(&cal.tokens, "tokens"));
  OSCARKV_RETURN_IF_ERROR(r.Str(&cal.k_objective, "k_objective"));
  OSCARKV_RETURN_IF_ERROR(r.Str(&cal.v_objective, "v_objective"));
  const size_t dd = static_cast<size_t>(head_dim) * head_dim;
  cal.layers.resize(layers);
  for (uint32_t l = 0; l < layers; ++l) {
    CalibrationLayer& layer = cal.layers[l];
    OSCARKV_RETURN_IF_ERROR(r.Floats(&layer.k_rotation, dd, "R_K"));
    OSCARKV_RETURN_IF_ERROR(r.Floats(&layer.k_eigenvalues, head_dim, "eig_K"));
    OSCARKV_RETURN_IF_ERROR(r.Floats(&layer.v_rotation, dd, "R_V"));
    OSCARKV_RETURN_IF_ERROR(r.Floats(&layer.v_eigenvalues, head_dim, "eig_V"));
  }
  if (r.pos() != body.size()) {
    return absl::DataLossError(
        absl::StrCat("calibration file has ", body.size() - r.pos(), " trailing bytes"));
  }
  OSCARKV_RETURN_IF_ERROR(ValidateCalibration(cal));
  return cal;
}

absl::Status WriteCalibrationFile(const std::string& path, const Calibration& cal) {
  OSCARKV_ASSIGN_OR_RETURN(std::string bytes, SerializeCalibration(cal));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError("cannot open " + path + " for writing");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError("write failed: " + path);
  return absl::OkStatus();
}

absl::StatusOr<Calibration> ReadCalibrationFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open calibration file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<Calibration> cal = ParseCalibration(ss.str());
  if (!cal.ok()) return ::oscarkv::Annotate(cal.status(), path);
  return cal;
}

uint64_t CalibrationFingerprint(std::string_view serialized) {
  return XXH3_64bits(serialized.data(), serialized.size());
}

absl::StatusOr<Calibration> CalibrateFromCovariances(std::span<const LayerCovariances> layers,
                                                     std::string_view k_objective,
                                                     std::string_view v_objective,
                                                     uint64_t model_fingerprint,
                                                     float k_clip_ratio, float v_clip_ratio) {
  if (layers.empty()) return absl::InvalidArgumentError("no layers to calibrate");
  if (k_objective != "qqt" && k_objective != "ktk") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown K objective \"", std::string(k_objective), "\" (qqt | ktk)"));
  }
  if (v_objective != "sst" && v_objective != "vtv") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown V objective \"", std::string(v_objective), "\" (sst | vtv)"));
  }
  Calibration cal;
  cal.model_fingerprint = model_fingerprint;
  cal.head_dim = layers[0].head_dim;
  cal.k_clip_ratio = k_clip_ratio;
  cal.v_clip_ratio = v_clip_ratio;
  cal.tokens = static_cast<uint64_t>(layers[0].tokens);
  cal.k_objective = std::string(k_objective);
  cal.v_objective = std::string(v_objective);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerCovariances& c = layers[l];
    if (c.head_dim != cal.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, " head_dim ", c.head_dim,
                                                     " != layer 0's ", cal.head_dim));
    }
    const std::vector<double>& ck = k_objective == "qqt" ? c.qqt : c.ktk;
    const std::vector<double>& cv = v_objective == "sst" ? c.sst : c.vtv;
    if (cv.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l, ": ", std::string(v_objective), " covariance missing (run pass 2)"));
    }
    OSCARKV_ASSIGN_OR_RETURN(RotationResult rk, BuildRotation(ck, c.head_dim));
    OSCARKV_ASSIGN_OR_RETURN(RotationResult rv, BuildRotation(cv, c.head_dim));
    CalibrationLayer layer;
    layer.k_rotation.assign(rk.rotation.begin(), rk.rotation.end());
    layer.k_eigenvalues.assign(rk.eigenvalues.begin(), rk.eigenvalues.end());
    layer.v_rotation.assign(rv.rotation.begin(), rv.rotation.end());
    layer.v_eigenvalues.assign(rv.eigenvalues.begin(), rv.eigenvalues.end());
    cal.layers.push_back(std::move(layer));
  }
  OSCARKV_RETURN_IF_ERROR(ValidateCalibration(cal));
  return cal;
}

}  // namespace oscarkv::quant
