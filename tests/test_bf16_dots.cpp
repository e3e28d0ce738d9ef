// bf16 dots (ops/bf16_dots.hpp, LinearWeight::set_bf16_dots): products of bf16 weights that round
// x to bfloat16 as well, against a loop in double over the rounded values; a row's result
// independent of the other rows; and whole models with bf16 dots against the fixtures' logits,
// the forms agreeing with each other.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <retnet/retnet.hpp>
#include <string>

#include "compare.hpp"
#include "npy.hpp"

namespace {

using retnet::Form;
using retnet::Index;
using retnet::LinearWeight;
using retnet::LoadOptions;
using retnet::Matrix;
using retnet::WeightType;

Matrix<float> random_matrix(Index rows, Index cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  Matrix<float> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

Matrix<double> rounded_to_bf16(const Matrix<float>& x) {
  return x.unaryExpr([](float v) { return retnet::bf16_to_float(retnet::float_to_bf16(v)); })
      .cast<double>();
}

TEST(Bf16Dots, ProductsAreTheSumsOverTheRoundedInputs) {
  std::printf("bf16 dots on this build: %s\n",
              retnet::detail::kHasBf16Dots ? "vdpbf16ps" : "the float kernel over rounded x");
  std::mt19937 rng(5);
  for (Index cols : {300, 64, 33, 1}) {
    const Matrix<float> w = random_matrix(101, cols, rng);
    LinearWeight<float> packed(w, WeightType::kBF16);
    const Matrix<double> decoded = packed.to_matrix().cast<double>();
    packed.set_bf16_dots(true);
    for (Index rows : {1, 2, 3, 7, 8, 9, 17, 40, 300}) {
      const Matrix<float> x = random_matrix(rows, cols, rng);
      Matrix<float> y;
      retnet::linear(x, packed, y);
      const std::string what = std::to_string(rows) + " x " + std::to_string(cols);
      // Each product of two bfloat16 values is exact in float; `cols` float additions then round
      // at most by cols · 2^-24 of Σ |products|. Not rounding x would miss by about 2^-9 of each
      // product, far more: the test also checks that the unrounded sums are outside the bound.
      const Matrix<double> xr = rounded_to_bf16(x);
      const Matrix<double> want = xr * decoded.transpose();
      const Matrix<double> magnitude = xr.cwiseAbs() * decoded.cwiseAbs().transpose();
      const Matrix<double> unrounded = x.cast<double>() * decoded.transpose();
      double worst_unrounded = 0;
      for (Index i = 0; i < rows; ++i)
        for (Index r = 0; r < w.rows(); ++r) {
          const double bound = double(cols + 1) * std::ldexp(1.0, -24) * magnitude(i, r);
          ASSERT_LE(std::abs(y(i, r) - want(i, r)), bound) << what << " at " << i << "," << r;
          worst_unrounded =
              std::max(worst_unrounded, std::abs(unrounded(i, r) - want(i, r)) / bound);
        }
      if (cols > 1 && rows > 2) {
        EXPECT_GT(worst_unrounded, 1.0) << what;
      }
      // A row's result does not depend on the other rows.
      Matrix<float> one;
      retnet::linear(Matrix<float>(x.row(rows - 1)), packed, one);
      ASSERT_EQ(one.row(0), y.row(rows - 1)) << what;
    }
  }
}

TEST(Bf16Dots, NonFiniteInputsGiveNonFiniteOutputs) {
  LinearWeight<float> w(Matrix<float>::Ones(50, 64), WeightType::kBF16);
  w.set_bf16_dots(true);
  Matrix<float> x = Matrix<float>::Ones(3, 64), y;
  x(1, 40) = std::nanf("");
  x(2, 7) = std::numeric_limits<float>::infinity();
  retnet::linear(x, w, y);
  EXPECT_TRUE((y.row(0).array() == 64.f).all());
  EXPECT_TRUE(y.row(1).array().isNaN().all());
  EXPECT_TRUE((y.row(2).array() == std::numeric_limits<float>::infinity()).all());
}

TEST(Bf16Dots, NeedBf16Weights) {
  LinearWeight<float> w(Matrix<float>::Ones(4, 8), WeightType::kQ8);
  EXPECT_THROW(w.set_bf16_dots(true), retnet::InvalidArgument);
  const std::string dir = std::string(RETNET_TEST_DATA_DIR) + "/torchscale-tiny";
  LoadOptions options{WeightType::kQ8};
  options.bf16_dots = true;
  try {
    retnet::load_model<float>(dir, options);
    FAIL() << "q8 weights with bf16 dots loaded";
  } catch (const retnet::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 dots need bf16 weights"), std::string::npos)
        << e.what();
  }
}

TEST(Bf16Dots, ModelsStayWithinTheBf16BoundOfTheFixtures) {
  // The bounds of QuantisedModels.LogitsStayCloseToTheFixtures for bf16 weights: rounding x as
  // well adds about as much error again as rounding the weights (printed).
  struct Case {
    const char* fixture;
    double bound;
  };
  for (const Case& c : {Case{"torchscale-tiny", 0.015}, Case{"fla-tiny", 0.04}}) {
    const std::string dir = std::string(RETNET_TEST_DATA_DIR) + "/" + c.fixture;
    const auto a = retnet::load_npy(dir + "/logits.npy");
    const auto v = a.as<double>();
    const Matrix<float> expected =
        Eigen::Map<const Matrix<double>>(v.data(), a.shape[0] * a.shape[1], a.shape[2])
            .cast<float>();
    const auto t = retnet::load_npy(dir + "/tokens.npy");
    const auto ids = t.as<int32_t>();
    const retnet::TokenMatrix tokens =
        Eigen::Map<const retnet::TokenMatrix>(ids.data(), t.shape[0], t.shape[1]);
    LoadOptions options{WeightType::kBF16};
    const double plain = retnet::testing::relative_error(
        retnet::load_model<float>(dir, options).forward(tokens, Form::kParallel), expected);
    options.bf16_dots = true;
    const auto model = retnet::load_model<float>(dir, options);
    const Matrix<float> parallel = model.forward(tokens, Form::kParallel);
    const double error = retnet::testing::relative_error(parallel, expected);
    std::printf("%s bf16: relative logit error %.3g, with bf16 dots %.3g\n", c.fixture, plain,
                error);
    EXPECT_LE(error, c.bound) << c.fixture;
    EXPECT_NE(error, plain) << "bf16 dots changed nothing";
    // Every form multiplies each row alike, but retention's rounding, which differs between the
    // forms (1e-6 or so), now and then moves a value of x across a rounding boundary of bfloat16,
    // 2^-8 of it: the forms agree to a small part of the rounding's own error (measured 7e-4 and
    // 3e-3 for the recurrent form), not to float precision. A broken form misses by far more.
    for (Form form : {Form::kRecurrent, Form::kChunkwise}) {
      const double apart = retnet::testing::relative_error(model.forward(tokens, form), parallel);
      std::printf("  %s against parallel: %.3g\n", retnet::form_name(form), apart);
      EXPECT_LE(apart, c.bound / 4) << c.fixture << " " << retnet::form_name(form);
    }
  }
}

}  // namespace
