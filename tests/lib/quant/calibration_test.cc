// Tests of Hadamard, covariance accumulation, rotations and the calibration file
// (lib/quant/hadamard.h, lib/quant/calibration.h): quant.md E.2 (iv) and the calibration math.
#include "lib/quant/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/quant/hadamard.h"

namespace oscarkv::quant {
namespace {

using Mat = std::vector<double>;  // row-major d x d

Mat RandomOrthogonal(int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n01;
  Mat m(static_cast<size_t>(d) * d);
  for (auto& v : m) v = n01(rng);
  for (int j = 0; j < d; ++j) {
    for (int k = 0; k < j; ++k) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += m[i * d + j] * m[i * d + k];
      for (int i = 0; i < d; ++i) m[i * d + j] -= dot * m[i * d + k];
    }
    double nrm = 0;
    for (int i = 0; i < d; ++i) nrm += m[i * d + j] * m[i * d + j];
    for (int i = 0; i < d; ++i) m[i * d + j] /= std::sqrt(nrm);
  }
  return m;
}

template <typename T>
double OrthoError(const std::vector<T>& r, int d) {
  double worst = 0;
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) {
      double s = 0;
      for (int k = 0; k < d; ++k) s += static_cast<double>(r[i * d + k]) * r[j * d + k];
      worst = std::max(worst, std::fabs(s - (i == j ? 1.0 : 0.0)));
    }
  }
  return worst;
}

TEST(Hadamard, OrthogonalSymmetricAndMatchesFastTransform) {
  for (int d : {8, 64, 128}) {
    const Mat h = HadamardMatrix(d);
    EXPECT_LT(OrthoError(h, d), 1e-12);
    for (int i = 0; i < d; ++i) {
      for (int j = 0; j < d; ++j) {
        EXPECT_EQ(h[i * d + j], h[j * d + i]);
        EXPECT_NEAR(std::fabs(h[i * d + j]), 1.0 / std::sqrt(d), 1e-15);
      }
    }
    std::mt19937 rng(d);
    std::normal_distribution<float> n01;
    std::vector<float> x(d);
    for (auto& v : x) v = n01(rng);
    std::vector<float> y = x;
    FastHadamardTransform(y.data(), d);
    for (int j = 0; j < d; ++j) {
      double want = 0;
      for (int i = 0; i < d; ++i) want += x[i] * h[i * d + j];
      EXPECT_NEAR(y[j], want, 1e-5);
    }
  }
  EXPECT_EQ(BitReversalPermutation(8), (std::vector<int>{0, 4, 2, 6, 1, 5, 3, 7}));
}

// Synthetic activations with planted covariances: rows x = z * diag(sqrt(lambda)) * V^T.
struct Synthetic {
  int tokens, q_heads, kv_heads, d;
  std::vector<float> q, k, v;
  Mat vq;                      // planted eigenvectors of C_Q (columns)
  std::vector<double> lambda;  // planted eigenvalues (per column of vq)
};

Synthetic MakeSynthetic(int tokens, int q_heads, int kv_heads, int d, uint32_t seed) {
  Synthetic s{tokens, q_heads, kv_heads, d, {}, {}, {}, RandomOrthogonal(d, seed), {}};
  const Mat vk = RandomOrthogonal(d, seed + 1);
  s.lambda.resize(d);
  // A flat bulk and 8 well-separated dominant directions (ratio 1.6), ascending in index.
  for (int i = 0; i < d; ++i) {
    s.lambda[i] = i < d - 8 ? 1.0 + 0.01 * i : 20.0 * std::pow(1.6, i - (d - 8));
  }
  std::mt19937 rng(seed + 2);
  std::normal_distribution<double> n01;
  auto sample = [&](const Mat& basis, std::vector<float>* out, int heads, double scale) {
    out->resize(static_cast<size_t>(tokens) * heads * d);
    std::vector<double> z(d);
    for (int row = 0; row < tokens * heads; ++row) {
      for (int i = 0; i < d; ++i) z[i] = n01(rng) * std::sqrt(s.lambda[i]) * scale;
      for (int j = 0; j < d; ++j) {
        double acc = 0;
        for (int i = 0; i < d; ++i) acc += z[i] * basis[j * d + i];  // (z V^T)_j
        (*out)[static_cast<size_t>(row) * d + j] = static_cast<float>(acc);
      }
    }
  };
  sample(s.vq, &s.q, q_heads, 1.0);
  sample(vk, &s.k, kv_heads, 0.5);
  sample(RandomOrthogonal(d, seed + 3), &s.v, kv_heads, 0.3);
  return s;
}

absl::StatusOr<LayerCovariances> Accumulate(const Synthetic& s, int chunk) {
  auto acc = CovarianceAccumulator::Create(s.q_heads, s.kv_heads, s.d);
  if (!acc.ok()) return acc.status();
  const size_t qrow = static_cast<size_t>(s.q_heads) * s.d;
  const size_t krow = static_cast<size_t>(s.kv_heads) * s.d;
  for (int t0 = 0; t0 < s.tokens; t0 += chunk) {
    const int n = std::min(chunk, s.tokens - t0);
    absl::Status st = acc->AddPass1(std::span(s.q).subspan(t0 * qrow, n * qrow),
                                    std::span(s.k).subspan(t0 * krow, n * krow),
                                    std::span(s.v).subspan(t0 * krow, n * krow), n);
    if (!st.ok()) return st;
  }
  for (int t0 = 0; t0 < s.tokens; t0 += chunk + 3) {  // a different chunking for pass 2
    const int n = std::min(chunk + 3, s.tokens - t0);
    absl::Status st = acc->AddPass2(std::span(s.k).subspan(t0 * krow, n * krow),
                                    std::span(s.v).subspan(t0 * krow, n * krow), n);
    if (!st.ok()) return st;
  }
  return acc->Finish();
}

TEST(CovarianceAccumulator, MatchesDirectFloat64Computation) {
  for (int d : {64, 128}) {
    const Synthetic s = MakeSynthetic(100, 6, 2, d, 31 + d);
    auto cov = Accumulate(s, 17);
    ASSERT_TRUE(cov.ok()) << cov.status();
    const int g = s.q_heads / s.kv_heads;
    const int n = s.tokens;
    Mat qqt(d * d, 0), ktk(d * d, 0), vtv(d * d, 0), sst(d * d, 0);
    auto at = [&](const std::vector<float>& x, int heads, int t, int h, int i) {
      return static_cast<double>(x[(static_cast<size_t>(t) * heads + h) * d + i]);
    };
    for (int h = 0; h < s.kv_heads; ++h) {
      Mat cqh(d * d, 0);
      for (int qh = h * g; qh < (h + 1) * g; ++qh) {
        for (int t = 0; t < n; ++t) {
          for (int i = 0; i < d; ++i) {
            for (int j = 0; j < d; ++j) {
              cqh[i * d + j] += at(s.q, s.q_heads, t, qh, i) * at(s.q, s.q_heads, t, qh, j);
            }
          }
        }
      }
      for (auto& c : cqh) c /= static_cast<double>(n) * g;
      std::vector<double> w(n);
      double wsum = 0;
      for (int t = 0; t < n; ++t) {
        double acc = 0;
        for (int i = 0; i < d; ++i) {
          for (int j = 0; j < d; ++j) {
            acc += at(s.k, s.kv_heads, t, h, i) * cqh[i * d + j] * at(s.k, s.kv_heads, t, h, j);
          }
        }
        w[t] = acc;
        wsum += acc;
      }
      for (int t = 0; t < n; ++t) w[t] *= n / wsum;  // mean 1
      for (int t = 0; t < n; ++t) {
        for (int i = 0; i < d; ++i) {
          for (int j = 0; j < d; ++j) {
            const double ki = at(s.k, s.kv_heads, t, h, i), kj = at(s.k, s.kv_heads, t, h, j);
            const double vi = at(s.v, s.kv_heads, t, h, i), vj = at(s.v, s.kv_heads, t, h, j);
            ktk[i * d + j] += ki * kj / (s.kv_heads * static_cast<double>(n));
            vtv[i * d + j] += vi * vj / (s.kv_heads * static_cast<double>(n));
            sst[i * d + j] += w[t] * vi * vj / (s.kv_heads * static_cast<double>(n));
          }
        }
      }
      for (int i = 0; i < d * d; ++i) qqt[i] += cqh[i] / s.kv_heads;
    }
    auto expect_close = [&](const Mat& got, const Mat& want, const char* what) {
      double scale = 0;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (int i = 0; i < d * d; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-10 * scale) << what << " entry " << i;
      }
    };
    expect_close(cov->qqt, qqt, "qqt");
    expect_close(cov->ktk, ktk, "ktk");
    expect_close(cov->vtv, vtv, "vtv");
    expect_close(cov->sst, sst, "sst");
    EXPECT_EQ(cov->tokens, n);
  }
}

TEST(CovarianceAccumulator, EnforcesPassOrderAndShapes) {
  auto acc = CovarianceAccumulator::Create(4, 2, 64);
  ASSERT_TRUE(acc.ok());
  std::vector<float> q(3 * 4 * 64, 1.0f), kv(3 * 2 * 64, 1.0f);
  EXPECT_EQ(acc->AddPass2(kv, kv, 3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(acc->AddPass1(q, kv, kv, 4).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(acc->AddPass1(q, kv, kv, 3).ok());
  ASSERT_TRUE(acc->AddPass2(kv, kv, 3).ok());
  EXPECT_EQ(acc->AddPass1(q, kv, kv, 3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(CovarianceAccumulator::Create(3, 2, 64).ok());
  EXPECT_FALSE(CovarianceAccumulator::Create(4, 2, 0).ok());
}

// Undo P_br and H: U = (R P^T) H, with (R P^T)[:, perm[j]] = R[:, j].
Mat RecoverU(const std::vector<double>& r, const std::vector<double>& eig, int d) {
  std::vector<int> sorted(d);
  for (int i = 0; i < d; ++i) sorted[i] = i;
  std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) { return eig[a] > eig[b]; });
  const std::vector<int> br = BitReversalPermutation(d);
  std::vector<int> perm(d);
  for (int i = 0; i < d; ++i) perm[br[i]] = sorted[i];
  Mat m(d * d), u(d * d, 0.0);
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) m[i * d + perm[j]] = r[i * d + j];
  }
  const Mat h = HadamardMatrix(d);
  for (int i = 0; i < d; ++i) {
    for (int k = 0; k < d; ++k) {
      for (int j = 0; j < d; ++j) u[i * d + j] += m[i * d + k] * h[k * d + j];
    }
  }
  return u;
}

TEST(BuildRotation, OrthogonalAndRecoversPlantedEigenvectors) {
  for (int d : {64, 128}) {
    for (uint32_t seed : {5u, 6u}) {
      const Synthetic s = MakeSynthetic(4000, 4, 2, d, seed);
      auto cov = Accumulate(s, 1000);
      ASSERT_TRUE(cov.ok()) << cov.status();
      auto rot = BuildRotation(cov->qqt, d);
      ASSERT_TRUE(rot.ok()) << rot.status();
      EXPECT_LT(OrthoError(rot->rotation, d), 1e-10);
      const std::vector<float> rf(rot->rotation.begin(), rot->rotation.end());
      EXPECT_LT(OrthoError(rf, d), 1e-5);
      EXPECT_TRUE(std::is_sorted(rot->eigenvalues.begin(), rot->eigenvalues.end()));
      // Planted lambda is ascending in column index, like eigh's output.
      const Mat u = RecoverU(rot->rotation, rot->eigenvalues, d);
      for (int c = 0; c < d; ++c) {
        // Sample eigenvalues: the dominant ones within 10%, the bulk within the
        // Marchenko-Pastur spread (d / n = 0.008 -> about +-20%).
        EXPECT_NEAR(rot->eigenvalues[c], s.lambda[c], (c >= d - 8 ? 0.1 : 0.3) * s.lambda[c])
            << "c=" << c;
        // Sign convention: the largest-magnitude entry of each eigenvector is positive.
        int arg = 0;
        for (int i = 1; i < d; ++i) {
          if (std::fabs(u[i * d + c]) > std::fabs(u[arg * d + c])) arg = i;
        }
        EXPECT_GT(u[arg * d + c], 0);
        if (c < d - 8) continue;
        // Dominant eigenvectors (gaps of 1.6x, 16000 samples) are recovered up to sign.
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += u[i * d + c] * s.vq[i * d + c];
        EXPECT_GT(std::fabs(dot), 0.99) << "eigvec " << c;
      }
      // q~ . k~ == q . k for the float rotation.
      std::mt19937 rng(seed);
      std::normal_distribution<float> n01;
      std::vector<float> q(d), k(d), qr(d), kr(d);
      for (int i = 0; i < d; ++i) q[i] = n01(rng), k[i] = 3.0f * n01(rng);
      double dot = 0, dot_r = 0, scale = 0;
      for (int j = 0; j < d; ++j) {
        double a = 0, b = 0;
        for (int i = 0; i < d; ++i) a += q[i] * rf[i * d + j], b += k[i] * rf[i * d + j];
        dot_r += a * b;
        dot += static_cast<double>(q[j]) * k[j];
        scale += std::fabs(static_cast<double>(q[j]) * k[j]);
      }
      EXPECT_NEAR(dot_r, dot, 1e-5 * scale);
    }
  }
}

TEST(BuildRotation, RejectsBadInput) {
  EXPECT_FALSE(BuildRotation(std::vector<double>(48 * 48, 0.0), 48).ok());
  EXPECT_FALSE(BuildRotation(std::vector<double>(10, 0.0), 64).ok());
  std::vector<double> nan(64 * 64, 0.0);
  nan[5] = NAN;
  EXPECT_FALSE(BuildRotation(nan, 64).ok());
}

Calibration MakeCalibration(int d, uint32_t seed, int layers = 2) {
  std::vector<LayerCovariances> covs;
  for (int l = 0; l < layers; ++l) {
    auto cov = Accumulate(MakeSynthetic(300, 4, 2, d, seed + 10 * l), 64);
    EXPECT_TRUE(cov.ok());
    covs.push_back(*cov);
  }
  auto cal = CalibrateFromCovariances(covs, "qqt", "sst", 0x1234abcdull, 0.96f, 0.92f);
  EXPECT_TRUE(cal.ok()) << cal.status();
  return *cal;
}

TEST(CalibrationFile, RoundTripsAndIsDeterministic) {
  for (int d : {64, 128}) {
    const Calibration cal = MakeCalibration(d, 40);
    auto bytes = SerializeCalibration(cal);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    // Same activations, computed again from scratch: byte-identical file.
    auto again = SerializeCalibration(MakeCalibration(d, 40));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*bytes, *again);
    EXPECT_EQ(CalibrationFingerprint(*bytes), CalibrationFingerprint(*again));
    auto other = SerializeCalibration(MakeCalibration(d, 41));
    ASSERT_TRUE(other.ok());
    EXPECT_NE(CalibrationFingerprint(*bytes), CalibrationFingerprint(*other));

    auto parsed = ParseCalibration(*bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->head_dim, d);
    EXPECT_EQ(parsed->model_fingerprint, 0x1234abcdull);
    EXPECT_EQ(parsed->tokens, 300u);
    EXPECT_EQ(parsed->k_objective, "qqt");
    EXPECT_EQ(parsed->v_objective, "sst");
    EXPECT_FLOAT_EQ(parsed->k_clip_ratio, 0.96f);
    EXPECT_FLOAT_EQ(parsed->v_clip_ratio, 0.92f);
    ASSERT_EQ(parsed->layers.size(), 2u);
    for (size_t l = 0; l < 2; ++l) {
      EXPECT_EQ(parsed->layers[l].k_rotation, cal.layers[l].k_rotation);
      EXPECT_EQ(parsed->layers[l].v_rotation, cal.layers[l].v_rotation);
      EXPECT_EQ(parsed->layers[l].k_eigenvalues, cal.layers[l].k_eigenvalues);
      EXPECT_EQ(parsed->layers[l].v_eigenvalues, cal.layers[l].v_eigenvalues);
    }
    const std::string path = ::testing::TempDir() + "/cal_" + std::to_string(d) + ".okvcal";
    ASSERT_TRUE(WriteCalibrationFile(path, cal).ok());
    auto from_file = ReadCalibrationFile(path);
    ASSERT_TRUE(from_file.ok()) << from_file.status();
    EXPECT_EQ(*SerializeCalibration(*from_file), *bytes);
    std::remove(path.c_str());
  }
  EXPECT_EQ(ReadCalibrationFile("/nonexistent/cal").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CalibrationFile, DetectsTruncationAndCorruption) {
  const Calibration cal = MakeCalibration(64, 50, 1);
  const std::string bytes = *SerializeCalibration(cal);
  for (size_t len : {size_t{0}, size_t{7}, size_t{20}, size_t{60}, bytes.size() / 2,
                     bytes.size() - 9, bytes.size() - 1}) {
    auto r = ParseCalibration(std::string_view(bytes).substr(0, len));
    ASSERT_FALSE(r.ok()) << "len " << len;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::string bad = bytes;
    size_t at = 12 + rng() % (bad.size() - 12);  // past magic and version
    bad[at] = static_cast<char>(bad[at] ^ (1u << (rng() % 8)));
    auto r = ParseCalibration(bad);
    ASSERT_FALSE(r.ok()) << "flip at " << at;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  }
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_EQ(ParseCalibration(magic).status().code(), absl::StatusCode::kDataLoss);
  std::string version = bytes;
  version[8] = 2;
  EXPECT_EQ(ParseCalibration(version).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ParseCalibration(bytes + "x").status().code(), absl::StatusCode::kDataLoss);
}

TEST(CalibrationFile, RejectsInvalidContents) {
  Calibration cal = MakeCalibration(64, 60, 1);
  Calibration bad = cal;
  bad.layers[0].k_rotation.resize(32 * 32);
  EXPECT_EQ(SerializeCalibration(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = cal;
  bad.layers[0].v_rotation[3] += 0.1f;  // no longer orthogonal
  EXPECT_EQ(SerializeCalibration(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = cal;
  bad.k_clip_ratio = 1.5f;
  EXPECT_EQ(SerializeCalibration(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = cal;
  bad.head_dim = 96;
  EXPECT_EQ(SerializeCalibration(bad).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<LayerCovariances> covs(1);
  auto cov = Accumulate(MakeSynthetic(50, 2, 2, 64, 1), 50);
  ASSERT_TRUE(cov.ok());
  covs[0] = *cov;
  EXPECT_FALSE(CalibrateFromCovariances(covs, "qq", "sst", 0, 0.96f, 0.92f).ok());
  covs[0].sst.clear();
  EXPECT_FALSE(CalibrateFromCovariances(covs, "qqt", "sst", 0, 0.96f, 0.92f).ok());
  EXPECT_TRUE(CalibrateFromCovariances(covs, "ktk", "vtv", 0, 0.96f, 0.92f).ok());
}

}  // namespace
}  // namespace oscarkv::quant
