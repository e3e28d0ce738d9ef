// ops/activation.hpp: exact GELU and swish (docs/NUMERICS.md#feed-forward) against known values
// and against the formulas evaluated in long double:
//   gelu(x)  = x Φ(x) = 0.5 x erfc(-x / sqrt 2)
//   swish(x) = x sigmoid(x) = x / (1 + e^-x)
// Tolerances, in ulps of the scalar type: swish 4 relative to |expected| (an exp, a sum, a
// division); gelu 4 relative to max(|expected|, |x|), since 1 + erf(x / sqrt 2) loses all its
// relative precision where erf nears -1 (as torch's does): the error is a few ulps of 1,
// times x. Either way the scale is at least the smallest normal number / epsilon, so that a
// result below the normal range may come out as 0 (float swish(-100): e^100 overflows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "retnet/ops/activation.hpp"

namespace {

using retnet::Activation;
using retnet::Index;
using retnet::Matrix;

long double gelu_by_formula(long double x) {
  return 0.5L * x * std::erfc(-x / std::sqrt(2.0L));
}
long double swish_by_formula(long double x) {
  return x / (1.0L + std::exp(-x));
}

template <typename Scalar>
double ulps_from(Scalar got, long double expected, long double scale_at_least = 0) {
  const long double scale = std::max<long double>(
      {std::abs(expected), scale_at_least,
       std::numeric_limits<Scalar>::min() / std::numeric_limits<Scalar>::epsilon()});
  return double(std::abs(got - expected) / scale / std::numeric_limits<Scalar>::epsilon());
}

// Points from -40 to 40, dense near 0 where both functions bend, plus the far tails.
std::vector<double> sample_points() {
  std::vector<double> xs;
  for (int i = -4000; i <= 4000; ++i) xs.push_back(i / 100.0);
  for (double x : {1e-30, -1e-30, 1e-8, -1e-8, 88.0, -88.0, 100.0, -100.0, 700.0, -700.0})
    xs.push_back(x);
  return xs;
}

template <typename Scalar>
void check_against_formulas() {
  for (double x : sample_points()) {
    const Scalar s = Scalar(x);
    EXPECT_LE(ulps_from(retnet::gelu(s), gelu_by_formula(s), std::abs(s)), 4.0)
        << "gelu(" << x << ")";
    EXPECT_LE(ulps_from(retnet::swish(s), swish_by_formula(s)), 4.0) << "swish(" << x << ")";
  }
}

TEST(Activation, GeluAndSwishMatchTheFormulasInDouble) {
  check_against_formulas<double>();
}
TEST(Activation, GeluAndSwishMatchTheFormulasInFloat) {
  check_against_formulas<float>();
}

// Values from the math: Φ(1) = 0.841344746068542948..., sigmoid(1) = 1 / (1 + 1/e).
TEST(Activation, KnownValues) {
  EXPECT_EQ(retnet::gelu(0.0), 0.0);
  EXPECT_NEAR(retnet::gelu(1.0), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(retnet::gelu(-1.0), -0.15865525393145707, 1e-15);
  EXPECT_NEAR(retnet::gelu(2.0), 2 * 0.9772498680518208, 1e-15);
  EXPECT_EQ(retnet::swish(0.0), 0.0);
  EXPECT_NEAR(retnet::swish(1.0), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(retnet::swish(-1.0), -0.2689414213699951, 1e-15);
  // Exact GELU, not the tanh approximation: they differ by about 1.6e-4 at x = 1.5.
  EXPECT_NEAR(retnet::gelu(1.5), 1.5 * 0.9331927987311419, 1e-15);
}

// Where e^-x overflows (float from x < -88.7) swish is -0, not NaN; GELU's tails are 0 and x.
TEST(Activation, TailsAreFinite) {
  for (float x : {-89.0f, -1000.0f, -std::numeric_limits<float>::max()}) {
    EXPECT_EQ(retnet::swish(x), 0.0f) << x;
    EXPECT_EQ(retnet::gelu(x), 0.0f) << x;
  }
  for (float x : {89.0f, 1000.0f}) {
    EXPECT_EQ(retnet::swish(x), x) << x;
    EXPECT_EQ(retnet::gelu(x), x) << x;
  }
}

// activate() applies the chosen function to every element of the matrix.
TEST(Activation, ActivateAppliesTheChosenFunctionToEveryElement) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 3.0);
  Matrix<double> x(7, 13);
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
  for (Activation kind : {Activation::kGelu, Activation::kSwish}) {
    Matrix<double> y = x;
    retnet::activate<double>(kind, y);
    for (Index r = 0; r < x.rows(); ++r)
      for (Index c = 0; c < x.cols(); ++c) {
        const double v = x(r, c);
        if (kind == Activation::kGelu)
          EXPECT_LE(ulps_from(y(r, c), gelu_by_formula(v), std::abs(v)), 4.0) << r << "," << c;
        else
          EXPECT_LE(ulps_from(y(r, c), swish_by_formula(v)), 4.0) << r << "," << c;
      }
  }
}

}  // namespace

// A block of a wider matrix (rows contiguous, not adjacent): its elements are activated and the
// columns around it are left as they are.
TEST(Activation, ActivateOnABlockLeavesTheRestAlone) {
  std::mt19937 rng(12);
  std::normal_distribution<double> normal(0.0, 3.0);
  Matrix<double> x(5, 12);
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
  Matrix<double> y = x;
  retnet::activate<double>(Activation::kSwish, y.middleCols(3, 4));
  for (Index r = 0; r < x.rows(); ++r)
    for (Index c = 0; c < x.cols(); ++c) {
      if (c >= 3 && c < 7)
        EXPECT_LE(ulps_from(y(r, c), swish_by_formula(x(r, c))), 4.0) << r << "," << c;
      else
        EXPECT_EQ(y(r, c), x(r, c)) << r << "," << c;
    }
}
