// ops/norm.hpp: RMSNorm and LayerNorm (docs/NUMERICS.md#decoder) against the formulas evaluated
// in long double, one row at a time:
//   RMSNorm(x)   = x / sqrt(mean(x²) + eps) ⊙ weight
//   LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) ⊙ weight + bias,  var biased
// Tolerances: relative 1e-13 in double, 2e-6 in float (a few roundings of a sum of n terms).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compare.hpp"
#include "retnet/ops/norm.hpp"

namespace {

using retnet::Index;
using retnet::Matrix;
using retnet::NormKind;
using retnet::Vector;
using retnet::testing::relative_error;

template <typename Scalar>
Matrix<Scalar> random_rows(Index rows, Index cols, double mean, double spread, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(mean, spread);
  Matrix<Scalar> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = Scalar(normal(rng));
  return m;
}

// The norm of one row by the formula; weight and bias may be empty (1 and 0).
template <typename Scalar>
Matrix<Scalar> norm_by_formula(NormKind kind, double eps, const Matrix<Scalar>& x,
                               const Vector<Scalar>& weight, const Vector<Scalar>& bias) {
  Matrix<Scalar> y(x.rows(), x.cols());
  const Index n = x.cols();
  for (Index r = 0; r < x.rows(); ++r) {
    long double mean = 0;
    for (Index i = 0; i < n; ++i) mean += x(r, i);
    mean /= n;
    const long double center = kind == NormKind::kLayerNorm ? mean : 0.0L;
    long double squares = 0;
    for (Index i = 0; i < n; ++i) squares += (x(r, i) - center) * (x(r, i) - center);
    const long double denominator = std::sqrt(squares / n + eps);
    for (Index i = 0; i < n; ++i) {
      long double v = (x(r, i) - center) / denominator;
      if (weight.size() > 0) v *= weight[i];
      if (bias.size() > 0) v += bias[i];
      y(r, i) = Scalar(v);
    }
  }
  return y;
}

template <typename Scalar>
void check_normalize(double tolerance) {
  // Means far from zero tell RMSNorm from LayerNorm; spreads near sqrt(eps) make eps count.
  const double eps = 1e-6;
  for (NormKind kind : {NormKind::kRMSNorm, NormKind::kLayerNorm})
    for (double spread : {3.0, 1e-3})
      for (Index n : {1, 2, 7, 64, 257}) {
        const Matrix<Scalar> x = random_rows<Scalar>(3, n, 0.5 * spread, spread, unsigned(n));
        Matrix<Scalar> y = x;
        for (Index r = 0; r < y.rows(); ++r)
          retnet::normalize(kind, Scalar(eps), y.row(r).data(), n);
        const Matrix<Scalar> expected = norm_by_formula(kind, eps, x, {}, {});
        // LayerNorm of one value is exactly 0: compare on the scale of 1, not of 0.
        EXPECT_LE(relative_error(y, expected, 1.0), tolerance)
            << (kind == NormKind::kRMSNorm ? "rms" : "layer") << " n=" << n << " spread=" << spread;
      }
}

TEST(Normalize, MatchesTheFormulaInDouble) {
  check_normalize<double>(1e-13);
}
TEST(Normalize, MatchesTheFormulaInFloat) {
  check_normalize<float>(2e-6);
}

// Known values: RMSNorm of (3, 4) with eps 0 is (3, 4) / sqrt(12.5); LayerNorm of (1, 3) is
// (-1, 1); a constant row under LayerNorm is all zeros (mean removed, 0 / sqrt(eps)).
TEST(Normalize, KnownValues) {
  double rms[] = {3, 4};
  retnet::normalize(NormKind::kRMSNorm, 0.0, rms, 2);
  EXPECT_DOUBLE_EQ(rms[0], 3 / std::sqrt(12.5));
  EXPECT_DOUBLE_EQ(rms[1], 4 / std::sqrt(12.5));
  double layer[] = {1, 3};
  retnet::normalize(NormKind::kLayerNorm, 0.0, layer, 2);
  EXPECT_DOUBLE_EQ(layer[0], -1.0);
  EXPECT_DOUBLE_EQ(layer[1], 1.0);
  double constant[] = {5, 5, 5};
  retnet::normalize(NormKind::kLayerNorm, 1e-6, constant, 3);
  for (double v : constant) EXPECT_EQ(v, 0.0);
  // eps inside the square root: (1e-3) / sqrt(1e-6 + 1e-6) = 1 / sqrt(2).
  double small[] = {1e-3};
  retnet::normalize(NormKind::kRMSNorm, 1e-6, small, 1);
  EXPECT_NEAR(small[0], 1 / std::sqrt(2.0), 1e-15);
}

template <typename Scalar>
void check_apply(double tolerance) {
  const double eps = 1e-5;
  for (NormKind kind : {NormKind::kRMSNorm, NormKind::kLayerNorm}) {
    retnet::Norm<Scalar> norm;
    norm.kind = kind;
    norm.weight = random_rows<Scalar>(1, 33, 1.0, 0.5, 5).transpose();
    if (kind == NormKind::kLayerNorm)
      norm.bias = random_rows<Scalar>(1, 33, 0.0, 0.5, 6).transpose();
    const Matrix<Scalar> x = random_rows<Scalar>(9, 33, 0.3, 2.0, 7);
    Matrix<Scalar> y;
    norm.apply(x, Scalar(eps), y);
    EXPECT_LE(relative_error(y, norm_by_formula(kind, eps, x, norm.weight, norm.bias)), tolerance)
        << (kind == NormKind::kRMSNorm ? "rms" : "layer");
  }
}

TEST(Norm, ApplyMatchesTheFormulaWithWeightAndBiasInDouble) {
  check_apply<double>(1e-13);
}
TEST(Norm, ApplyMatchesTheFormulaWithWeightAndBiasInFloat) {
  check_apply<float>(2e-6);
}

// A weight (or bias) of another width than the input is refused before any element is read.
TEST(Norm, WrongWidthIsRefused) {
  for (NormKind kind : {NormKind::kRMSNorm, NormKind::kLayerNorm}) {
    retnet::Norm<double> norm;
    norm.kind = kind;
    norm.weight = Vector<double>::Ones(16);
    norm.bias = Vector<double>::Zero(kind == NormKind::kLayerNorm ? 15 : 0);
    Matrix<double> y;
    EXPECT_THROW(norm.apply(Matrix<double>::Ones(2, 17), 1e-5, y), retnet::InvalidArgument);
    if (kind == NormKind::kLayerNorm) {
      EXPECT_THROW(norm.apply(Matrix<double>::Ones(2, 16), 1e-5, y), retnet::InvalidArgument);
    }
  }
}

// Each row is normalised on its own: a row's result does not change with the rows around it.
TEST(Norm, RowsAreIndependent) {
  retnet::Norm<double> norm;
  norm.weight = Vector<double>::Constant(16, 1.5);
  const Matrix<double> x = random_rows<double>(5, 16, 0.0, 1.0, 8);
  Matrix<double> all, one;
  norm.apply(x, 1e-6, all);
  for (Index r = 0; r < x.rows(); ++r) {
    norm.apply(x.row(r), 1e-6, one);
    EXPECT_EQ(Matrix<double>(all.row(r)), one) << r;
  }
}

}  // namespace
