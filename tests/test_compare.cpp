// The tests' comparison helper (compare.hpp) fails on anything that is not a number or has the
// wrong shape: a NaN or an infinity in either argument or a size mismatch gives +infinity, so
// `EXPECT_LE(relative_error(a, b), tol)` fails for every tolerance. (It used to keep the
// previous maximum on a NaN, and NaN logits passed every fixture.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compare.hpp"

using retnet::Index;
using retnet::Matrix;
using retnet::Tensor4;
using retnet::testing::relative_error;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Matrix<double> sample() {
  Matrix<double> m(2, 3);
  m << 1, -2, 4, 0.5, 3, -1;
  return m;
}

}  // namespace

TEST(RelativeError, IsMaxDifferenceOverMaxReference) {
  const Matrix<double> ref = sample();
  EXPECT_EQ(relative_error(ref, ref), 0.0);
  Matrix<double> a = ref;
  a(1, 2) += 0.25;  // max |ref| = 4
  EXPECT_DOUBLE_EQ(relative_error(a, ref), 0.0625);
  EXPECT_DOUBLE_EQ(relative_error(a, ref, /*floor=*/10.0), 0.025);
  EXPECT_EQ(relative_error(Matrix<double>(), Matrix<double>()), 0.0);
  // An all-zero reference: the plain difference.
  EXPECT_DOUBLE_EQ(relative_error(Matrix<double>::Constant(2, 2, 0.5), Matrix<double>::Zero(2, 2)),
                   0.5);
  // Float against double, and blocks of either.
  const Matrix<float> f = ref.cast<float>();
  EXPECT_EQ(relative_error(f, ref), 0.0);
  EXPECT_EQ(relative_error(f.row(1), ref.row(1)), 0.0);
  EXPECT_EQ(relative_error(f.col(2), ref.col(2)), 0.0);
}

TEST(RelativeError, NonFiniteValuesOnEitherSideFail) {
  const Matrix<double> ref = sample();
  for (double bad : {kNaN, -kNaN, kInf, -kInf}) {
    SCOPED_TRACE(bad);
    Matrix<double> a = ref;
    a(0, 1) = bad;
    EXPECT_EQ(relative_error(a, ref), kInf) << "in the result";
    EXPECT_FALSE(relative_error(a, ref) <= 1e300);
    EXPECT_EQ(relative_error(ref, a), kInf) << "in the reference";
    EXPECT_EQ(relative_error(a, a), kInf) << "on both sides, at the same place";
    // As the first and as the last element: a NaN must not be skipped by where it sits.
    Matrix<double> first = ref, last = ref;
    first(0, 0) = bad, last(1, 2) = bad;
    EXPECT_EQ(relative_error(first, ref), kInf);
    EXPECT_EQ(relative_error(last, ref), kInf);
    EXPECT_EQ(relative_error(ref, first, 1.0), kInf);
    // Every element NaN.
    EXPECT_EQ(relative_error(Matrix<double>::Constant(2, 3, bad), ref), kInf);
  }
  // float NaN (logits are float).
  Matrix<float> f = sample().cast<float>();
  f(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(relative_error(f, sample()), kInf);
}

TEST(RelativeError, SizeAndShapeMismatchesFail) {
  const Matrix<double> ref = sample();
  EXPECT_EQ(relative_error(Matrix<double>(ref.topRows(1)), ref), kInf);  // fewer elements
  EXPECT_EQ(relative_error(ref, Matrix<double>(ref.topRows(1))), kInf);  // more elements
  EXPECT_EQ(relative_error(Matrix<double>(), ref), kInf);                // empty result
  EXPECT_EQ(relative_error(ref, Matrix<double>()), kInf);                // empty reference
  const Matrix<double> transposed = ref.transpose();                     // same size, 3 x 2
  EXPECT_EQ(relative_error(transposed, ref), kInf);
  EXPECT_EQ(relative_error(Matrix<double>(ref.reshaped<Eigen::RowMajor>(3, 2)), ref), kInf);
}

TEST(RelativeError, TensorsToo) {
  Tensor4<double> a(1, 2, 3, 2), b(1, 2, 3, 2);
  for (Index i = 0; i < a.size(); ++i) a.data()[i] = b.data()[i] = double(i) - 5.0;
  EXPECT_EQ(relative_error(a, b), 0.0);
  a(0, 1, 2, 1) = kNaN;
  EXPECT_EQ(relative_error(a, b), kInf);
  EXPECT_EQ(relative_error(b, a), kInf);
  a(0, 1, 2, 1) = kInf;
  EXPECT_EQ(relative_error(a, b), kInf);
  Tensor4<double> other_shape(1, 2, 2, 3);  // same size, other shape
  for (Index i = 0; i < b.size(); ++i) other_shape.data()[i] = b.data()[i];
  EXPECT_EQ(relative_error(other_shape, b), kInf);
  Tensor4<double> smaller(1, 2, 3, 1);
  smaller.setZero();
  EXPECT_EQ(relative_error(smaller, b), kInf);
  EXPECT_EQ(relative_error(b, smaller), kInf);
}
