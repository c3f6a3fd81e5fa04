// Tests of the host codec object (lib/quant/codec.h) for every codec M0-M8 at head dims 64/128:
// rotations preserve scores, encode == the fused CPU reference, decode error within budget,
// argument checking.
#include "lib/quant/codec.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/quant/calibration.h"

namespace oscarkv::quant {
namespace {

using kvformat::CodecId;

std::vector<float> HeavyTailed(int rows, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t3(3.0f);
  std::vector<float> out(static_cast<size_t>(rows) * d);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < d; ++i) {
      float v = t3(rng);
      if (i % 13 == 2) v = 5.0f * v + 3.0f;  // outlier channels
      out[static_cast<size_t>(r) * d + i] = v;
    }
  }
  return out;
}

// A calibration with the given objectives built from synthetic activations.
Calibration SyntheticCalibration(int d, const std::string& k_obj, const std::string& v_obj) {
  const int tokens = 256, hq = 4, hkv = 2;
  std::vector<float> q = HeavyTailed(tokens * hq, d, 1);
  std::vector<float> k = HeavyTailed(tokens * hkv, d, 2);
  std::vector<float> v = HeavyTailed(tokens * hkv, d, 3);
  auto acc = CovarianceAccumulator::Create(hq, hkv, d);
  EXPECT_TRUE(acc->AddPass1(q, k, v, tokens).ok());
  EXPECT_TRUE(acc->AddPass2(k, v, tokens).ok());
  std::vector<LayerCovariances> covs = {*acc->Finish(), *acc->Finish()};
  auto cal = CalibrateFromCovariances(covs, k_obj, v_obj, 7, 0.96f, 0.92f);
  EXPECT_TRUE(cal.ok()) << cal.status();
  return *cal;
}

class CodecTest : public ::testing::TestWithParam<std::tuple<CodecId, int>> {
 protected:
  void SetUp() override {
    const auto [id, d] = GetParam();
    spec_ = &GetCodecSpec(id);
    d_ = d;
    if (spec_->needs_calibration) {
      cal_ = SyntheticCalibration(d, std::string(spec_->k_objective),
                                  std::string(spec_->v_objective));
    }
    auto codec = Codec::Create(*spec_, d, spec_->needs_calibration ? &cal_ : nullptr, 1);
    ASSERT_TRUE(codec.ok()) << codec.status();
    codec_ = std::move(*codec);
  }
  const CodecSpec* spec_ = nullptr;
  int d_ = 0;
  Calibration cal_;
  std::unique_ptr<Codec> codec_;
};

TEST_P(CodecTest, RotationsPreserveScoresAndInvertOnOutput) {
  const int d = d_;
  std::vector<float> q = HeavyTailed(4, d, 10), k = HeavyTailed(4, d, 11);
  std::vector<float> qr = q, kr = k;
  ASSERT_TRUE(codec_->RotateQuery(qr).ok());
  ASSERT_TRUE(codec_->RotateKey(kr).ok());
  for (int a = 0; a < 4; ++a) {
    double dot = 0, dot_r = 0, scale = 0;
    for (int i = 0; i < d; ++i) {
      dot += static_cast<double>(q[a * d + i]) * k[a * d + i];
      dot_r += static_cast<double>(qr[a * d + i]) * kr[a * d + i];
      scale += std::fabs(static_cast<double>(q[a * d + i]) * k[a * d + i]);
    }
    EXPECT_NEAR(dot_r, dot, 1e-5 * scale);
  }
  std::vector<float> v = HeavyTailed(4, d, 12), vr = v;
  ASSERT_TRUE(codec_->RotateValue(vr).ok());
  ASSERT_TRUE(codec_->UnrotateOutput(vr).ok());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(vr[i], v[i], 1e-5 * (1 + std::fabs(v[i])));
  if (codec_->key_rotation() != nullptr) {
    double worst = 0;
    const float* r = codec_->key_rotation();
    for (int i = 0; i < d; ++i) {
      for (int j = 0; j < d; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += static_cast<double>(r[i * d + c]) * r[j * d + c];
        worst = std::max(worst, std::fabs(s - (i == j)));
      }
    }
    EXPECT_LT(worst, 1e-5);
  }
  EXPECT_EQ(codec_->key_rotation() == nullptr, spec_->rotation == RotationKind::kNone);
  std::vector<float> odd(d + 1);
  EXPECT_EQ(codec_->RotateKey(odd).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(CodecTest, EncodeMatchesFusedReferenceAndDecodeIsWithinBudget) {
  const int d = d_, tokens = 64, heads = 2;
  for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
    const bool key = side == KvSide::kKey;
    const std::vector<float> x = HeavyTailed(tokens * heads, d, key ? 20 : 21);  // [T][H][D]
    std::vector<float> xr = x;
    ASSERT_TRUE((key ? codec_->RotateKey(xr) : codec_->RotateValue(xr)).ok());
    std::vector<float> norms;
    if (key && codec_->uses_token_norms()) {
      norms.resize(tokens);
      ASSERT_TRUE(codec_->ComputeTokenNorms(xr, tokens, heads, norms).ok());
    }
    const size_t seg = codec_->SegmentBytes(side, tokens);
    EXPECT_EQ(seg, kvformat::SegmentBytes(codec_->segment_kind(side), tokens, d));
    // The fused reference over the unrotated input, with the codec's rotation and clip.
    std::vector<uint8_t> fused(seg * heads);
    std::vector<float> fused_norms(tokens);
    kernels::KvQuantParams p;
    p.input_f32 = x.data();
    p.rotation = key ? codec_->key_rotation() : codec_->value_rotation();
    p.token_norms_out = norms.empty() ? nullptr : fused_norms.data();
    p.output = fused.data();
    p.tokens = tokens;
    p.heads = heads;
    p.head_dim = d;
    p.kind = codec_->segment_kind(side);
    p.clip_ratio = codec_->clip_ratio(side);
    ASSERT_EQ(kernels::KvQuantRef(p), kernels::KvQuantStatus::kOk);
    if (!norms.empty()) {
      EXPECT_EQ(fused_norms, norms);
    }

    double err2 = 0, ref2 = 0;
    for (int h = 0; h < heads; ++h) {
      std::vector<float> rows(static_cast<size_t>(tokens) * d);
      for (int t = 0; t < tokens; ++t) {
        std::copy_n(&xr[(static_cast<size_t>(t) * heads + h) * d], d, &rows[t * d]);
      }
      std::vector<uint8_t> out(seg);
      ASSERT_TRUE(codec_->EncodeSegment(side, rows, tokens, norms, out).ok());
      EXPECT_TRUE(std::equal(out.begin(), out.end(), fused.begin() + h * seg))
          << spec_->name << " side " << key << " head " << h;
      std::vector<float> back(rows.size());
      ASSERT_TRUE(codec_->DecodeSegment(side, out, tokens, norms, back).ok());
      // Back to the original basis and compare with the unrotated input: V through the codec's
      // output un-rotation (o * R_V^T), K through R_K^T by hand.
      if (!key) {
        ASSERT_TRUE(codec_->UnrotateOutput(back).ok());
      } else if (codec_->key_rotation() != nullptr) {
        const float* r = codec_->key_rotation();
        const std::vector<float> b2 = back;
        for (int t = 0; t < tokens; ++t) {
          for (int i = 0; i < d; ++i) {
            double acc = 0;
            for (int j = 0; j < d; ++j) acc += b2[t * d + j] * r[i * d + j];
            back[t * d + i] = static_cast<float>(acc);
          }
        }
      }
      for (int t = 0; t < tokens; ++t) {
        for (int i = 0; i < d; ++i) {
          const double want = x[(static_cast<size_t>(t) * heads + h) * d + i];
          err2 += (back[t * d + i] - want) * (back[t * d + i] - want);
          ref2 += want * want;
        }
      }
    }
    const double rel = std::sqrt(err2 / ref2);
    // Budgets: bf16 rounding (2^-8 relative) for M0. INT2 on heavy-tailed t(3) rows with outlier
    // channels: rotated or grouped codecs stay below 0.6 (measured 0.2-0.45); per-token codecs
    // without rotation (M1, M4) are the baselines the papers see collapse (measured 0.69-0.97).
    const bool unrotated_per_token =
        spec_->rotation == RotationKind::kNone &&
        codec_->segment_kind(side) == kvformat::SegmentKind::kInt2PerToken;
    const double budget = spec_->id == CodecId::kBf16 ? 4e-3 : unrotated_per_token ? 1.0 : 0.6;
    EXPECT_LT(rel, budget) << spec_->name << (key ? " K" : " V");
    EXPECT_GT(rel, 0.0);
  }
}

TEST_P(CodecTest, ChecksArguments) {
  const int d = d_;
  std::vector<float> rows(64 * d, 1.0f);
  std::vector<uint8_t> out(codec_->SegmentBytes(KvSide::kValue, 64));
  EXPECT_EQ(codec_->EncodeSegment(KvSide::kValue, rows, 63, {}, out).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> small(out.size() - 1);
  EXPECT_EQ(codec_->EncodeSegment(KvSide::kValue, rows, 64, {}, small).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> norms(64, 1.0f);
  EXPECT_EQ(codec_->EncodeSegment(KvSide::kValue, rows, 64, norms, out).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> kout(codec_->SegmentBytes(KvSide::kKey, 64));
  EXPECT_EQ(codec_->EncodeSegment(KvSide::kKey, rows, 64, {}, kout).ok(),
            !codec_->uses_token_norms());
}

INSTANTIATE_TEST_SUITE_P(
    AllCodecs, CodecTest,
    ::testing::Combine(::testing::Values(CodecId::kBf16, CodecId::kInt2Naive,
                                         CodecId::kInt2Hadamard, CodecId::kOscarHadamardClip,
                                         CodecId::kOscarNoRotation, CodecId::kOscarGram,
                                         CodecId::kOscar, CodecId::kKivi2, CodecId::kOscarTns),
                       ::testing::Values(64, 128)),
    [](const auto& info) {
      std::string name(GetCodecSpec(std::get<0>(info.param)).name);
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name + "_d" + std::to_string(std::get<1>(info.param));
    });

TEST(Codec, CreateValidatesCalibration) {
  EXPECT_EQ(Codec::Create("oscar", 128).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Codec::Create("nope", 128).status().code(), absl::StatusCode::kNotFound);
  const Calibration cal = SyntheticCalibration(64, "qqt", "sst");
  EXPECT_TRUE(Codec::Create("oscar", 64, &cal, 0).ok());
  EXPECT_EQ(Codec::Create("oscar", 128, &cal, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // head_dim mismatch
  EXPECT_EQ(Codec::Create("oscar", 64, &cal, 2).status().code(),
            absl::StatusCode::kInvalidArgument);  // layer out of range
  EXPECT_EQ(Codec::Create("oscar-gram", 64, &cal, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // objectives mismatch
  EXPECT_EQ(Codec::Create("int2-naive", 48).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Codec::Create("int2-hadamard", 96).status().code(),
            absl::StatusCode::kInvalidArgument);
  Calibration v96 = cal;
  v96.v_clip_ratio = 0.96f;
  auto c = Codec::Create("oscar", 64, &v96, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_FLOAT_EQ((*c)->clip_ratio(KvSide::kValue), 0.96f);  // file's ratio wins
  EXPECT_FLOAT_EQ((*c)->clip_ratio(KvSide::kKey), 0.96f);
  EXPECT_FLOAT_EQ((*Codec::Create("int2-naive", 64))->clip_ratio(KvSide::kKey), 1.0f);
}

}  // namespace
}  // namespace oscarkv::quant
