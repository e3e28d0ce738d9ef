// ops/weight_type.hpp, ops/quantize.hpp and the typed LinearWeight: f16, bf16, q8 and q4 weights
// against a reference written here from the formats' definitions (docs/FORMATS.md, "Quantised
// weights"), and the products over them against plain loops. Then what is f16's own (F16Weights,
// F16Models): products against a brute-force loop over the halves, the demo model (stored in F16)
// computing with its halves as they are, and `convert`'s F16 folders.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <retnet/retnet.hpp>
#include <string>

#include "npy.hpp"
#include "pool_ignores_load.hpp"
#include "retention_reference.hpp"
#include "temp_dir.hpp"

namespace {

using retnet::DType;
using retnet::Index;
using retnet::LinearWeight;
using retnet::Matrix;
using retnet::StoredRows;
using retnet::WeightType;

Matrix<float> random_matrix(Index rows, Index cols, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Matrix<float> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = float(normal(rng));
  return m;
}

float to_half_and_back(float v) {
  return retnet::half_to_float(retnet::float_to_half(v));
}

// The definition, value by value: blocks of 32 along each row; q8: scale = max|w| / 127 rounded
// to binary16, n = round(w / scale) in [-127, 127], w = scale · n; q4: scale = -m / 8 for the
// block's value m of largest magnitude, rounded to binary16, n = round(w / scale) + 8 in [0, 15],
// w = scale · (n - 8).
Matrix<double> reference_dequantised(const Matrix<float>& w, WeightType type) {
  Matrix<double> out(w.rows(), w.cols());
  for (Index r = 0; r < w.rows(); ++r)
    for (Index c0 = 0; c0 < w.cols(); c0 += 32) {
      const Index c1 = std::min<Index>(w.cols(), c0 + 32);
      float amax = 0, extreme = 0;
      for (Index c = c0; c < c1; ++c)
        if (std::abs(w(r, c)) > amax) amax = std::abs(w(r, c)), extreme = w(r, c);
      for (Index c = c0; c < c1; ++c) {
        if (type == WeightType::kF16) {
          out(r, c) = to_half_and_back(w(r, c));
        } else if (type == WeightType::kBF16) {
          out(r, c) = retnet::bf16_to_float(retnet::float_to_bf16(w(r, c)));
        } else if (type == WeightType::kQ8) {
          const float s = to_half_and_back(amax / 127);
          const float n = s > 0 ? std::clamp(std::nearbyint(w(r, c) / s), -127.f, 127.f) : 0.f;
          out(r, c) = double(s) * n;
        } else {
          const float s = to_half_and_back(-extreme / 8);
          const float n = s != 0 ? std::clamp(std::nearbyint(w(r, c) / s) + 8, 0.f, 15.f) : 8.f;
          out(r, c) = double(s) * (n - 8);
        }
      }
    }
  return out;
}

constexpr WeightType kTypes[] = {WeightType::kF16, WeightType::kBF16, WeightType::kQ8,
                                 WeightType::kQ4};

TEST(WeightTypes, DecodedValuesFollowTheDefinition) {
  std::mt19937 rng(1);
  // Shapes off every boundary: rows past a panel (48), columns past a block (32), odd for q4.
  for (auto [rows, cols] :
       {std::pair<Index, Index>{1, 1}, {5, 31}, {48, 32}, {50, 33}, {97, 100}, {3, 257}}) {
    const Matrix<float> w = random_matrix(rows, cols, rng);
    for (WeightType type : kTypes) {
      const Matrix<double> want = reference_dequantised(w, type);
      const Matrix<float> got = LinearWeight<float>(w, type).to_matrix();
      for (Index r = 0; r < rows; ++r)
        for (Index c = 0; c < cols; ++c)  // every decoded value is exact in float
          ASSERT_EQ(got(r, c), want(r, c)) << retnet::weight_type_name(type) << " " << rows << "x"
                                           << cols << " at " << r << "," << c;
    }
  }
}

TEST(WeightTypes, ErrorsAreWithinHalfAStep) {
  std::mt19937 rng(2);
  const Matrix<float> w = random_matrix(60, 96, rng);
  for (WeightType type : kTypes) {
    const Matrix<float> got = LinearWeight<float>(w, type).to_matrix();
    for (Index r = 0; r < w.rows(); ++r)
      for (Index c0 = 0; c0 < w.cols(); c0 += 32) {
        const auto block = w.row(r).segment(c0, 32);
        const double amax = block.cwiseAbs().maxCoeff();
        for (Index c = c0; c < c0 + 32; ++c) {
          const double err = std::abs(double(got(r, c)) - w(r, c));
          // Half a step, plus binary16's rounding of the scale times the code; q4's one
          // unreachable level (+8 steps) costs up to a whole step at the top of the range.
          // f16: half of 2^-10 of the value, or of binary16's subnormal step 2^-24.
          const double bound = type == WeightType::kF16
                                   ? std::max(std::abs(w(r, c)) * 0x1p-11, 0x1p-25)
                               : type == WeightType::kBF16 ? std::abs(w(r, c)) * 0x1p-8
                               : type == WeightType::kQ8   ? amax / 254 + amax * 0x1p-10
                                                           : amax / 8 + amax * 0x1p-9;
          ASSERT_LE(err, bound) << retnet::weight_type_name(type) << " at " << r << "," << c;
        }
      }
  }
}

// x's rows rounded as a q8/q4 product rounds them, from the definition: blocks of 32 columns,
// scale = max|x| / 127 in float, code = round(x / scale) in [-127, 127].
struct RoundedRows {
  std::vector<std::vector<int>> codes;
  std::vector<std::vector<float>> scales;
};
RoundedRows reference_rounded(const Matrix<float>& x) {
  RoundedRows out;
  for (Index i = 0; i < x.rows(); ++i) {
    out.codes.emplace_back(), out.scales.emplace_back();
    for (Index c0 = 0; c0 < x.cols(); c0 += 32) {
      float amax = 0;
      for (Index c = c0; c < std::min<Index>(x.cols(), c0 + 32); ++c)
        amax = std::max(amax, std::abs(x(i, c)));
      const float s = amax / 127;
      out.scales.back().push_back(s);
      for (Index c = c0; c < std::min<Index>(x.cols(), c0 + 32); ++c)
        out.codes.back().push_back(
            amax > 0 ? int(std::clamp(std::nearbyint(x(i, c) / s), -127.f, 127.f)) : 0);
    }
  }
  return out;
}

// y[i, r] of a q8/q4 product from the definition: per block an exact integer sum of code
// products, scaled by the weight's scale times x's, summed over blocks in order with fused
// multiply-adds (docs/NUMERICS.md).
Matrix<float> reference_int8_product(const Matrix<float>& x, const LinearWeight<float>& w) {
  const StoredRows stored = w.stored_rows(0, w.rows());
  const RoundedRows rx = reference_rounded(x);
  const int offset = w.type() == WeightType::kQ4 ? 8 : 0;
  const Index blocks = retnet::quant_blocks(w.cols());
  Matrix<float> y(x.rows(), w.rows());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index r = 0; r < w.rows(); ++r) {
      float sum = 0;
      for (Index b = 0; b < blocks; ++b) {
        int64_t dot = 0;
        for (Index c = b * 32; c < std::min<Index>(w.cols(), b * 32 + 32); ++c)
          dot += int64_t(stored.code(r, c) - offset) * rx.codes[i][c];
        const float scale = retnet::half_to_float(stored.scales[r * blocks + b]) * rx.scales[i][b];
        sum = std::fma(float(dot), scale, sum);
      }
      y(i, r) = sum;
    }
  return y;
}

TEST(WeightTypes, ProductsFollowTheDefinition) {
  std::printf("q8/q4 products on this build: int8 dot products %s\n",
              retnet::int8_dot_instructions());
  std::mt19937 rng(3);
  for (WeightType type : kTypes) {
    for (Index cols : {300, 64}) {
      const Matrix<float> w = random_matrix(101, cols, rng);
      const LinearWeight<float> packed(w, type);
      const Matrix<double> decoded = packed.to_matrix().cast<double>();
      for (Index rows : {1, 2, 3, 7, 8, 17, 40, 300}) {
        const Matrix<float> x = random_matrix(rows, cols, rng);
        Matrix<float> y;
        retnet::linear(x, packed, y);
        const std::string what = std::string(retnet::weight_type_name(type)) + ", " +
                                 std::to_string(rows) + " x " + std::to_string(cols);
        // Against the unrounded x: f16 and bf16 to float rounding; q8/q4 also to rounding x, which
        // moves each product by at most |w| times half of x's step.
        const Matrix<double> want = x.cast<double>() * decoded.transpose();
        for (Index i = 0; i < rows; ++i)
          for (Index r = 0; r < w.rows(); ++r) {
            double bound = 1e-5 * std::sqrt(double(cols));
            if (retnet::is_block_quantised(type))
              for (Index c0 = 0; c0 < cols; c0 += 32) {
                const Index n = std::min<Index>(32, cols - c0);
                bound += decoded.row(r).segment(c0, n).cwiseAbs().sum() *
                         x.row(i).segment(c0, n).cwiseAbs().maxCoeff() / 254;
              }
            ASSERT_LE(std::abs(y(i, r) - want(i, r)), bound) << what << " at " << i << "," << r;
          }
        if (retnet::is_block_quantised(type)) {
          // Against the definition's arithmetic, operation by operation: exact where the target
          // fuses multiply-adds as std::fma does.
          const Matrix<float> exact = reference_int8_product(x, packed);
#ifdef __FMA__
          ASSERT_EQ(y, exact) << what;
#else
          ASSERT_LE((y - exact).cwiseAbs().maxCoeff(), 1e-5 * exact.cwiseAbs().maxCoeff()) << what;
#endif
          // The portable kernel computes the integer kernel's results, bit for bit.
          Matrix<float> portable(rows, w.rows());
          retnet::detail::sliced_products<float>(
              x, 1, [&](size_t) -> const LinearWeight<float>& { return packed; },
              [&](size_t) -> Matrix<float>& { return portable; }, false);
          ASSERT_EQ(portable, y) << what;
        }
        // A row's result does not depend on the other rows, in every type.
        Matrix<float> one;
        retnet::linear(Matrix<float>(x.row(rows - 1)), packed, one);
        ASSERT_EQ(one.row(0), y.row(rows - 1)) << what;
      }
    }
  }
}

TEST(WeightTypes, ProductsOfNonFiniteInputsAreNotFinite) {
  // A NaN or an infinity in a block of x cannot be rounded to int8: the block's outputs say so.
  const LinearWeight<float> w(Matrix<float>::Ones(50, 64), WeightType::kQ8);
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    Matrix<float> x = Matrix<float>::Ones(2, 64), y;
    x(1, 40) = bad;
    retnet::linear(x, w, y);
    EXPECT_TRUE(y.row(0).allFinite());
    EXPECT_TRUE(y.row(1).array().isNaN().all());
  }
}

TEST(WeightTypes, StoredRowsRoundTripThroughThePanels) {
  std::mt19937 rng(4);
  const Matrix<float> w = random_matrix(100, 45, rng);
  for (WeightType type : {WeightType::kQ8, WeightType::kQ4}) {
    const LinearWeight<float> a(w, type);
    const StoredRows all = a.stored_rows(0, a.rows());
    // The stored form is quantize_rows' output for the same values.
    StoredRows direct;
    retnet::quantize_rows(type, w.data(), w.rows(), w.cols(), direct);
    EXPECT_EQ(all.codes, direct.codes);
    EXPECT_EQ(all.scales, direct.scales);
    // A part read across a panel boundary agrees with the whole.
    const StoredRows part = a.stored_rows(40, 20);
    for (Index r = 0; r < 20; ++r)
      for (Index c = 0; c < 45; ++c) ASSERT_EQ(part.code(r, c), all.code(40 + r, c));
    LinearWeight<float> b;
    b.assign_stored(100, 45, type, [&](Index first, Index n, StoredRows& out) {
      for (Index r = 0; r < n; ++r)
        for (Index c = 0; c < 45; ++c) out.set_code(r, c, all.code(first + r, c));
      for (Index i = 0; i < n * retnet::quant_blocks(45); ++i)
        out.scales[i] = all.scales[first * retnet::quant_blocks(45) + i];
    });
    EXPECT_EQ(b.to_matrix(), a.to_matrix());
  }
}

TEST(WeightTypes, HoldTheirStoredBytesOnly) {
  // 96 rows = 2 panels; 64 columns = 2 blocks.
  const Matrix<float> w = Matrix<float>::Ones(96, 64);
  EXPECT_EQ(LinearWeight<float>(w).stored_bytes(), 96u * 64 * 4);
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kF16).stored_bytes(), 96u * 64 * 2);
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kBF16).stored_bytes(), 96u * 64 * 2);
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kQ8).stored_bytes(), 2u * 2 * (32 * 48 + 2 * 48));
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kQ4).stored_bytes(), 2u * 2 * (16 * 48 + 2 * 48));
  EXPECT_EQ(LinearWeight<float>::bytes_for(96, 64, WeightType::kQ4), 2.0 * 2 * (16 * 48 + 2 * 48));
}

TEST(WeightTypes, RefuseValuesBeyondABinary16Scale) {
  Matrix<float> w = Matrix<float>::Ones(2, 40);
  w(1, 35) = 1e7f;  // max / 127 > 65504
  EXPECT_THROW(LinearWeight<float>(w, WeightType::kQ8), retnet::InvalidArgument);
  w(1, 35) = -6e5f;  // max / 8 > 65504
  EXPECT_THROW(LinearWeight<float>(w, WeightType::kQ4), retnet::InvalidArgument);
  w(1, 35) = -4e5f;  // within q4's range, not q8's
  EXPECT_NO_THROW(LinearWeight<float>(w, WeightType::kQ4));
  EXPECT_THROW(retnet::parse_weight_type("q5"), retnet::InvalidArgument);
  EXPECT_EQ(retnet::parse_weight_type("q4"), WeightType::kQ4);
  // Double models keep full precision only.
  EXPECT_THROW(LinearWeight<double>(Matrix<double>::Ones(2, 2), WeightType::kQ8),
               retnet::InvalidArgument);
}

TEST(WeightTypes, AConstantBlockIsExact) {
  // A block of one power of two decodes exactly in q4 (its value is -8 · scale, scale exact in
  // binary16); a zero block has scale 0 and decodes to zero in both.
  Matrix<float> w = Matrix<float>::Constant(3, 32, 0.25f);
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kQ4).to_matrix(), w);
  w.setZero();
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kQ4).to_matrix(), w);
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kQ8).to_matrix(), w);
}

// ---------------------------------------------------------------- whole models

using retnet::Form;
using retnet::LoadOptions;
using retnet::ModelConfig;
using retnet::ModelWeights;
using retnet::RetNetModel;
using retnet::TokenMatrix;

const std::string kData = RETNET_TEST_DATA_DIR;

TokenMatrix fixture_tokens(const std::string& dir) {
  const auto a = retnet::load_npy(dir + "/tokens.npy");
  const auto ids = a.as<int32_t>();
  return Eigen::Map<const TokenMatrix>(ids.data(), a.shape[0], a.shape[1]);
}

TEST(QuantisedModels, SavedFoldersLoadToTheSameModel) {
  // A converted folder holds the codes themselves: loading it gives the model that converting at
  // load time gives, bit for bit, in every form; and the f32 folder asked for as `type` is the
  // same model too.
  for (const char* fixture : {"torchscale-tiny", "fla-tiny"}) {
    const std::string source = kData + "/" + fixture;
    const TokenMatrix tokens = fixture_tokens(source);
    for (WeightType type : kTypes) {
      const auto converted = retnet::load_model<float>(source, LoadOptions{type});
      EXPECT_EQ(converted.config().weights, type);
      retnet::testing::TempDir dir;
      retnet::save_model(dir.str(), converted.config(), converted.weights());
      const auto loaded = retnet::load_model<float>(dir.str());  // its own type by default
      ASSERT_EQ(loaded.config().weights, type) << fixture;
      EXPECT_EQ(loaded.weights().size_bytes(loaded.config()),
                converted.weights().size_bytes(converted.config()));
      for (Form form : {Form::kParallel, Form::kChunkwise, Form::kRecurrent})
        ASSERT_EQ(loaded.forward(tokens, form), converted.forward(tokens, form))
            << fixture << " " << retnet::weight_type_name(type) << " " << retnet::form_name(form);
      // The stored folder can be read back in full precision as well: its decoded values.
      const auto widened = retnet::load_model<float>(dir.str(), LoadOptions{WeightType::kF32});
      EXPECT_EQ(widened.weights().output.to_matrix(), converted.weights().output.to_matrix());
    }
  }
}

TEST(QuantisedModels, LogitsStayCloseToTheFixtures) {
  // Relative logit error against the fixtures' float32 logits from each project's own code,
  // printed (docs/PERFORMANCE.md quotes them). The fixtures are random, untrained models (fla's
  // weights ~ N(0, 0.02)), the worst case for rounding, so the bounds, about twice the measured
  // errors, only catch a broken type; QuantisedModels.AreTheF32ModelOfTheirDecodedWeights holds
  // the arithmetic (WeightTypes.ProductsFollowTheDefinition each q8/q4 product's).
  struct Case {
    const char* fixture;
    double bound[4];  // f16, bf16, q8, q4
  };
  for (const Case& c : {Case{"torchscale-tiny", {0.0015, 0.015, 0.06, 0.75}},
                        Case{"fla-tiny", {0.002, 0.04, 0.09, 1.2}}}) {
    const std::string dir = kData + "/" + c.fixture;
    const auto a = retnet::load_npy(dir + "/logits.npy");
    const auto v = a.as<double>();
    const Matrix<double> expected =
        Eigen::Map<const Matrix<double>>(v.data(), a.shape[0] * a.shape[1], a.shape[2]);
    const TokenMatrix tokens = fixture_tokens(dir);
    const auto f32 = retnet::load_model<float>(dir);
    const double f32_error = retnet::testing::relative_error(f32.forward(tokens, Form::kParallel),
                                                             expected.cast<float>());
    EXPECT_LE(f32_error, 1e-5);
    for (int i = 0; i < 4; ++i) {
      const auto model = retnet::load_model<float>(dir, LoadOptions{kTypes[i]});
      const double error = retnet::testing::relative_error(model.forward(tokens, Form::kParallel),
                                                           expected.cast<float>());
      std::printf("%s %s: relative logit error %.3g\n", c.fixture,
                  retnet::weight_type_name(kTypes[i]), error);
      EXPECT_LE(error, c.bound[i]) << c.fixture << " " << retnet::weight_type_name(kTypes[i]);
      EXPECT_GT(error, f32_error) << "a rounded model cannot beat full precision here";
    }
  }
}

TEST(QuantisedModels, AreTheF32ModelOfTheirDecodedWeights) {
  // An f16/bf16/q8/q4 model computes what the f32 model computes with each linear map replaced by
  // the definition's decoded values (reference_dequantised, written above from the format alone):
  // to float rounding for f16 and bf16; q8/q4 products also round their x to int8 per block of 32
  // (ProductsFollowTheDefinition checks that exactly), which moves these random models' logits
  // by 1.8-2.9 % (measured), so their bound only catches a model that uses other weights.
  for (const char* fixture : {"torchscale-tiny", "fla-tiny"}) {
    const std::string dir = kData + "/" + fixture;
    const TokenMatrix tokens = fixture_tokens(dir);
    const auto f32 = retnet::load_model<float>(dir);
    for (WeightType type : kTypes) {
      ModelWeights<float> decoded = f32.weights();
      decoded.visit(f32.config(), [&](const std::string&, auto& t, const std::vector<int64_t>&) {
        if constexpr (retnet::is_linear_weight<std::decay_t<decltype(t)>>::value)
          t = std::decay_t<decltype(t)>(
              Matrix<float>(reference_dequantised(t.to_matrix(), type).template cast<float>()));
      });
      const RetNetModel<float> reference(f32.config(), std::move(decoded));
      const auto model = retnet::load_model<float>(dir, LoadOptions{type});
      const double bound = retnet::is_16_bit_float(type) ? 1e-5 : 0.06;
      for (Form form : {Form::kParallel, Form::kRecurrent}) {
        const double error = retnet::testing::relative_error(model.forward(tokens, form),
                                                             reference.forward(tokens, form));
        EXPECT_LE(error, bound) << fixture << " " << retnet::weight_type_name(type);
        // ... and the rounded weights' own error is larger than what rounding x adds.
        if (type == WeightType::kQ4) {
          EXPECT_LT(error, retnet::testing::relative_error(reference.forward(tokens, form),
                                                           f32.forward(tokens, form)))
              << fixture;
        }
      }
    }
  }
}

TEST(QuantisedModels, RandomWeightsOfATypeAreTheF32DrawsConverted) {
  ModelConfig config = retnet::read_config_json(nlohmann::json::parse(R"({
      "vocab_size": 100, "decoder_embed_dim": 64, "decoder_value_embed_dim": 64,
      "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 96, "decoder_layers": 1})"));
  const auto f32 = ModelWeights<float>::random(config, 5);
  const auto q4 = ModelWeights<float>::random(config, 5, WeightType::kQ4);
  EXPECT_EQ(q4.layers[0].ffn.fc2.to_matrix(),
            LinearWeight<float>(f32.layers[0].ffn.fc2.to_matrix(), WeightType::kQ4).to_matrix());
  EXPECT_LT(q4.size_bytes(config), f32.size_bytes(config) / 4);
}

TEST(QuantisedModels, DamagedConvertedFoldersAreRefused) {
  const auto model =
      retnet::load_model<float>(kData + "/torchscale-tiny", LoadOptions{WeightType::kQ8});
  retnet::testing::TempDir dir;
  retnet::save_model(dir.str(), model.config(), model.weights());
  // Without its quantization_config the folder's I8 codes are not weights.
  ModelConfig plain = model.config();
  plain.weights = WeightType::kF32;
  std::ofstream(dir.file("config.json")) << plain.to_json().dump();
  EXPECT_THROW(retnet::load_model<float>(dir.str()), retnet::FormatError);
  nlohmann::json j = model.config().to_json();
  j["quantization_config"]["quant_method"] = "gptq";
  std::ofstream(dir.file("config.json")) << j.dump();
  EXPECT_THROW(retnet::load_model<float>(dir.str()), retnet::FormatError);
  j["quantization_config"]["quant_method"] = "retnet";
  j["quantization_config"]["weights"] = "q4";  // q8 codes under a q4 config: shapes disagree
  std::ofstream(dir.file("config.json")) << j.dump();
  EXPECT_THROW(retnet::load_model<float>(dir.str()), retnet::FormatError);
}

// f16: the halves as they are

TEST(F16Weights, NamedAndParsed) {
  EXPECT_EQ(retnet::parse_weight_type("f16"), WeightType::kF16);
  EXPECT_STREQ(retnet::weight_type_name(WeightType::kF16), "f16");
  try {
    retnet::parse_weight_type("f8");
    FAIL() << "f8 was accepted";
  } catch (const retnet::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(expected f32, f16, bf16, q8 or q4)"), std::string::npos)
        << e.what();
  }
}

TEST(F16Weights, ProductsAreTheSumOverTheHalves) {
  // y[i, r] = Σ_q x[i, q] · half(W[r, q]), summed here in double over the halves decoded one by
  // one, for one row of x (decoded in registers) and for blocks of rows (decoded tiles), with W's
  // rows and columns off the panel (48), packet (8, 16) and depth (128) boundaries.
  std::mt19937 rng(11);
  for (Index cols : {1, 7, 33, 130, 300}) {
    for (Index w_rows : {1, 47, 49, 101}) {
      const Matrix<float> w = random_matrix(w_rows, cols, rng);
      const LinearWeight<float> packed(w, WeightType::kF16);
      for (Index rows : {1, 2, 3, 9, 17, 300}) {
        const Matrix<float> x = random_matrix(rows, cols, rng);
        Matrix<float> y;
        retnet::linear(x, packed, y);
        ASSERT_EQ(y.rows(), rows);
        ASSERT_EQ(y.cols(), w_rows);
        for (Index i = 0; i < rows; ++i)
          for (Index r = 0; r < w_rows; ++r) {
            double want = 0, magnitude = 0;
            for (Index q = 0; q < cols; ++q) {
              const double h = retnet::half_to_float(retnet::float_to_half(w(r, q)));
              want += double(x(i, q)) * h;
              magnitude += std::abs(double(x(i, q)) * h);
            }
            // float rounding of a chain of `cols` multiply-adds
            const double bound = 1e-6 * magnitude * std::sqrt(double(cols)) + 1e-30;
            ASSERT_LE(std::abs(double(y(i, r)) - want), bound)
                << rows << " x " << cols << " times " << w_rows << " at " << i << "," << r;
          }
        // One row alone (decoded in registers) gives the bits of the same row among many
        // (decoded tiles).
        Matrix<float> one;
        retnet::linear(Matrix<float>(x.row(rows - 1)), packed, one);
        ASSERT_EQ(one.row(0), y.row(rows - 1)) << rows << " x " << cols;
      }
    }
  }
}

TEST(F16Weights, HalvesAreKeptAndRangeIsChecked) {
  // Values that are halves (subnormals, the largest, signed zero) are stored as they are.
  Matrix<float> w(2, 5);
  w << 0x1p-24f, -0x1p-14f, 65504.f, -0.0f, 1.f / 3, 0.5f, -2.f, 0x1.ffcp-15f, 1e-8f, 3.f;
  const Matrix<float> got = LinearWeight<float>(w, WeightType::kF16).to_matrix();
  for (Index i = 0; i < w.size(); ++i)
    EXPECT_EQ(retnet::float_to_bits(got.data()[i]),
              retnet::float_to_bits(retnet::half_to_float(retnet::float_to_half(w.data()[i]))))
        << i;
  EXPECT_EQ(got(1, 0), 0.5f);
  EXPECT_EQ(got(0, 2), 65504.f);
  // A finite weight that binary16 cannot hold is refused, not made infinite.
  w(1, 3) = 65520.f;  // rounds up past the largest half
  try {
    LinearWeight<float> bad(w, WeightType::kF16);
    FAIL() << "65520 was accepted as f16";
  } catch (const retnet::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("beyond binary16's range"), std::string::npos) << e.what();
  }
  w(1, 3) = 65519.f;  // rounds down to 65504
  EXPECT_EQ(LinearWeight<float>(w, WeightType::kF16).at(1, 3), 65504.f);
}

const std::string kDemo = std::string(RETNET_SOURCE_DIR) + "/models/shakespeare";

// One thread: these tests compare values, not speed, and a busy machine makes OpenMP's barriers
// (one per product of a decoding step) cost more than the products.
class F16Models : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_before_ = retnet::num_threads();
    retnet::set_num_threads(1);
  }
  void TearDown() override { retnet::set_num_threads(threads_before_); }
  int threads_before_ = 1;
};

retnet::TokenMatrix demo_tokens(int64_t vocab = 256) {
  const std::string text = "ROMEO:\nBut soft, what light through yonder window breaks?\n";
  retnet::TokenMatrix tokens(1, Index(text.size()));
  for (size_t i = 0; i < text.size(); ++i) tokens(0, Index(i)) = int32_t(uint8_t(text[i]) % vocab);
  return tokens;
}

TEST_F(F16Models, TheDemoModelKeepsItsHalves) {
  // The demo checkpoint stores its linear maps and embedding as F16 (its norm weights as F32): it
  // loads as f16 by default, every weight is
  // the checkpoint's half as it is (the f32 model holds the same values, exactly widened), and
  // the logits are the f32 model's: the same values in the same chains of multiply-adds (bound:
  // 1e-6 of the largest logit, for a summation order that might differ; measured 0).
  const auto f16 = retnet::load_model<float>(kDemo);
  ASSERT_EQ(f16.config().weights, WeightType::kF16);
  const auto forced = retnet::load_model<float>(kDemo, LoadOptions{WeightType::kF16});
  const auto f32 = retnet::load_model<float>(kDemo, LoadOptions{WeightType::kF32});
  ASSERT_EQ(f32.config().weights, WeightType::kF32);
  // Half the bytes: 2 per weight of a linear map (the norms' few weights stay float32).
  const double ratio = double(f16.weights().size_bytes(f16.config())) /
                       double(f32.weights().size_bytes(f32.config()));
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.505);
  EXPECT_EQ(f16.weights().output.to_matrix(), f32.weights().output.to_matrix());
  EXPECT_EQ(f16.weights().layers[0].ffn.fc2.to_matrix(),
            f32.weights().layers[0].ffn.fc2.to_matrix());
  const retnet::TokenMatrix tokens = demo_tokens();
  for (Form form : {Form::kParallel, Form::kChunkwise, Form::kRecurrent}) {
    const Matrix<float> a = f16.forward(tokens, form), b = f32.forward(tokens, form);
    const double diff = (a - b).cwiseAbs().maxCoeff(), scale = b.cwiseAbs().maxCoeff();
    std::printf("demo %s: f16 vs f32 logits differ by at most %g (largest %g)\n",
                retnet::form_name(form), diff, scale);
    EXPECT_LE(diff, 1e-6 * scale) << retnet::form_name(form);
    EXPECT_EQ(forced.forward(tokens, form), a) << retnet::form_name(form);
  }
}

TEST_F(F16Models, ConvertedFoldersStoreF16AndLoadWithoutConverting) {
  // An f32 fixture converted to f16 (as `retnet convert --weights f16` does): its linear maps are
  // F16 tensors holding the rounded values, it loads back as f16 by default, and the demo's own
  // halves survive a round trip bit for bit.
  for (const std::string& source :
       {std::string(RETNET_TEST_DATA_DIR) + "/torchscale-tiny", kDemo}) {
    const auto converted = retnet::load_model<float>(source, LoadOptions{WeightType::kF16});
    retnet::testing::TempDir dir;
    retnet::save_model(dir.str(), converted.config(), converted.weights());
    retnet::CheckpointReader reader(dir.str());
    int f16_tensors = 0;
    for (const std::string& name : reader.names())
      if (name.find("proj.weight") != std::string::npos ||
          name.find("fc1.weight") != std::string::npos) {
        ASSERT_EQ(name.rfind(reader.prefix(), 0), 0u) << name;
        EXPECT_EQ(reader.dtype(name.substr(reader.prefix().size())), DType::F16) << name;
        ++f16_tensors;
      }
    EXPECT_GT(f16_tensors, 4) << source;
    const auto loaded = retnet::load_model<float>(dir.str());
    ASSERT_EQ(loaded.config().weights, WeightType::kF16) << source;
    EXPECT_EQ(loaded.weights().output.to_matrix(), converted.weights().output.to_matrix());
    EXPECT_EQ(loaded.weights().layers[0].retention.q_proj.to_matrix(),
              converted.weights().layers[0].retention.q_proj.to_matrix());
    const retnet::TokenMatrix tokens = demo_tokens(converted.config().vocab_size);
    EXPECT_EQ(loaded.forward(tokens, Form::kRecurrent), converted.forward(tokens, Form::kRecurrent))
        << source;
  }
}

TEST(F16Weights, DoubleModelsRefuseF16) {
  try {
    retnet::load_model<double>(kDemo, LoadOptions{WeightType::kF16});
    FAIL() << "a double model took f16 weights";
  } catch (const retnet::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("only float models hold f16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
