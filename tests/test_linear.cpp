// ops/linear.hpp: y = x Wᵀ, the product every layer is built from, against plain loops, in
// every shape, thread count and row grouping; and parallel_for (core/threads.hpp), which
// schedules it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <random>

#include "pool_ignores_load.hpp"
#include "retnet/core/threads.hpp"
#include "retnet/ops/linear.hpp"

namespace {

using retnet::Index;
using retnet::Matrix;

template <typename Scalar>
Matrix<Scalar> random_matrix(Index rows, Index cols, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  Matrix<Scalar> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = Scalar(normal(rng));
  return m;
}

// y = x Wᵀ by the definition, in long double. Fails on a shape mismatch and on any NaN or
// infinity in y or in the loops' result, whatever the tolerance.
template <typename Scalar>
::testing::AssertionResult matches_loops(const Matrix<Scalar>& x, const Matrix<Scalar>& w,
                                         const Matrix<Scalar>& y, double tolerance) {
  if (y.rows() != x.rows() || y.cols() != w.rows() || x.cols() != w.cols())
    return ::testing::AssertionFailure()
           << "y is " << y.rows() << "x" << y.cols() << " for a " << x.rows() << "x" << x.cols()
           << " times " << w.cols() << "x" << w.rows() << " product";
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < w.rows(); ++j) {
      long double sum = 0, magnitude = 0;
      for (Index k = 0; k < x.cols(); ++k) {
        sum += static_cast<long double>(x(i, k)) * w(j, k);
        magnitude += std::abs(static_cast<long double>(x(i, k)) * w(j, k));
      }
      const double got = double(y(i, j)), want = double(sum);
      // Relative to the sum of |terms|: the bound a reordered float summation can meet.
      const double bound = tolerance * double(magnitude + 1);
      if (!std::isfinite(got) || !std::isfinite(want) || !std::isfinite(bound) ||
          !(std::abs(got - want) <= bound))
        return ::testing::AssertionFailure()
               << "row " << i << ", column " << j << " of a " << x.rows() << "x" << x.cols()
               << " times " << w.cols() << "x" << w.rows() << " product: " << got << " vs " << want
               << " (bound " << bound << ")";
    }
  return ::testing::AssertionSuccess();
}

template <typename Scalar>
void expect_matches_loops(const Matrix<Scalar>& x, const Matrix<Scalar>& w, const Matrix<Scalar>& y,
                          double tolerance) {
  ASSERT_TRUE(matches_loops(x, w, y, tolerance));
}

// The comparison itself: a NaN or infinity on either side, or a wrong shape, never passes.
TEST(Linear, TheLoopComparisonRejectsNonFiniteValuesAndWrongShapes) {
  std::mt19937 rng(23);
  const auto x = random_matrix<float>(3, 5, rng), w = random_matrix<float>(4, 5, rng);
  Matrix<float> y;
  retnet::linear(x, retnet::LinearWeight<float>(w), y);
  ASSERT_TRUE(matches_loops(x, w, y, 1e-6));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    Matrix<float> broken_y = y;  // in the result
    broken_y(1, 2) = bad;
    EXPECT_FALSE(matches_loops(x, w, broken_y, 1e6));
    Matrix<float> broken_x = x;  // in the reference (the loops read x)
    broken_x(2, 0) = bad;
    EXPECT_FALSE(matches_loops(broken_x, w, y, 1e6));
  }
  EXPECT_FALSE(matches_loops(x, w, Matrix<float>(y.topRows(2)), 1e6));
  EXPECT_FALSE(matches_loops(x, w, Matrix<float>(y.leftCols(3)), 1e6));
  EXPECT_FALSE(matches_loops(x, w, Matrix<float>(), 1e6));
}

template <typename Scalar>
void check_shapes(double tolerance) {
  std::mt19937 rng(7);
  // Every row count of the decode path (1..16: blocks of 8, 4, 2 and 1 rows of x, one pass over
  // each panel) and the blocked prompt path above it (17, 40; 300 rows: past the 256-row block);
  // inner sizes below and past the 128-value depth block (partial sums accumulated in y); output
  // sizes below, at and past one 48-row panel (the zero-padded last panel), and past the 256-row
  // threading threshold.
  for (Index rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 15, 16, 17, 40, 300})
    for (Index inner : {1, 5, 16, 33, 129, 300})
      for (Index out : {1, 13, 47, 48, 49, 300}) {
        if (rows == 300 && out == 300 && inner > 33) continue;  // the loops' check takes seconds
        const auto x = random_matrix<Scalar>(rows, inner, rng);
        const auto w = random_matrix<Scalar>(out, inner, rng);
        Matrix<Scalar> y;
        retnet::linear(x, retnet::LinearWeight<Scalar>(w), y);
        expect_matches_loops(x, w, y, tolerance);
      }
}

TEST(Linear, FloatMatchesLoopsForEveryRowCount) {
  check_shapes<float>(1e-6);
}
TEST(Linear, DoubleMatchesLoopsForEveryRowCount) {
  check_shapes<double>(1e-14);
}

TEST(LinearWeight, PanelsHoldTheRowsOfW) {
  std::mt19937 rng(17);
  for (Index rows : {1, 47, 48, 50, 97}) {
    const auto w = random_matrix<float>(rows, 9, rng);
    const retnet::LinearWeight<float> packed(w);
    EXPECT_EQ(packed.rows(), rows);
    EXPECT_EQ(packed.cols(), 9);
    EXPECT_EQ(packed.panels(), (rows + 47) / 48);
    EXPECT_EQ(packed.to_matrix(), w);
    // Panel p, element (q, r) = W[48p + r, q]; rows past W are zero.
    const Index last = packed.panels() - 1;
    float scratch[9 * 48];
    const float* panel = packed.tile(last, 0, 9, scratch);  // f32: the panel itself
    EXPECT_NE(panel, scratch);
    for (Index q = 0; q < 9; ++q) {
      EXPECT_EQ(panel[q * 48 + (rows - 1) % 48], w(rows - 1, q));
      for (Index r = rows - 48 * last; r < 48; ++r) EXPECT_EQ(panel[q * 48 + r], 0.f);
    }
    std::vector<float> row(9);
    packed.copy_row(rows / 2, row.data());
    for (Index q = 0; q < 9; ++q) EXPECT_EQ(row[size_t(q)], w(rows / 2, q));
  }
  const retnet::LinearWeight<float> packed(random_matrix<float>(5, 3, rng));
  std::vector<float> row(3);
  EXPECT_THROW(packed.copy_row(5, row.data()), retnet::InvalidArgument);
}

TEST(Linear, RejectsMismatchedShapes) {
  std::mt19937 rng(19);
  const retnet::LinearWeight<float> w(random_matrix<float>(6, 4, rng));
  Matrix<float> y;
  EXPECT_THROW(retnet::linear(random_matrix<float>(2, 5, rng), w, y), retnet::InvalidArgument);
  Matrix<float> wrong(2, 5);
  EXPECT_THROW(retnet::linear(random_matrix<float>(2, 4, rng), w, Eigen::Ref<Matrix<float>>(wrong)),
               retnet::InvalidArgument);
}

TEST(Linear, SameResultWithOneAndTwoThreads) {
  std::mt19937 rng(3);
  const retnet::LinearWeight<float> w(random_matrix<float>(1000, 512, rng));
  const int before = retnet::num_threads();
  for (Index rows : {8, 100}) {
    const auto x = random_matrix<float>(rows, 512, rng);
    Matrix<float> one, two;
    retnet::set_num_threads(1);
    retnet::linear(x, w, one);
    retnet::set_num_threads(2);
    retnet::linear(x, w, two);
    // Each output is summed the same way whichever thread owns its panel.
    EXPECT_EQ(one, two);
  }
  retnet::set_num_threads(before);
}

TEST(Linear, ARowsResultDoesNotDependOnTheOtherRows) {
  // A server steps many sequences in one batch and promises each the output it would have alone:
  // every row of x must go through the same sums whether it is alone or in a block of any size.
  std::mt19937 rng(4);
  const retnet::LinearWeight<float> w(random_matrix<float>(200, 300, rng));
  const auto x = random_matrix<float>(40, 300, rng);
  Matrix<float> all, one;
  for (Index rows : {1, 2, 3, 5, 8, 13, 16, 17, 40}) {
    retnet::linear(Matrix<float>(x.topRows(rows)), w, all);
    for (Index r = 0; r < rows; ++r) {
      retnet::linear(Matrix<float>(x.row(r)), w, one);
      ASSERT_EQ(all.row(r), one.row(0)) << "row " << r << " of " << rows;
    }
  }
}

TEST(Linear, TwoThreadSharesMatchLoops) {
  // Both paths split W's panels between threads, with output sizes that do and do not divide
  // into whole panels.
  std::mt19937 rng(11);
  const int before = retnet::num_threads();
  retnet::set_num_threads(2);
  for (Index rows : {3, 16, 17, 90})
    for (Index out : {256, 300, 1001}) {
      const auto x = random_matrix<float>(rows, 70, rng);
      const auto w = random_matrix<float>(out, 70, rng);
      Matrix<float> y;
      retnet::linear(x, retnet::LinearWeight<float>(w), y);
      expect_matches_loops(x, w, y, 1e-6);
    }
  retnet::set_num_threads(before);
}

TEST(Linear, SeveralWeightsInOneRegionMatchLoops) {
  // linear over several weights (q, k, v, g in one parallel region): each product checked
  // against loops, with weights below the 256-row threading threshold (thread 0 alone), above
  // it, and not whole panels; few rows and many; one and two threads.
  std::mt19937 rng(13);
  const int before = retnet::num_threads();
  for (int threads : {1, 2}) {
    retnet::set_num_threads(threads);
    for (Index rows : {1, 8, 40}) {
      const auto x = random_matrix<float>(rows, 48, rng);
      const auto a = random_matrix<float>(100, 48, rng);
      const auto b = random_matrix<float>(300, 48, rng);
      const auto c = random_matrix<float>(517, 48, rng);
      const retnet::LinearWeight<float> pa(a), pb(b), pc(c);
      Matrix<float> ya, yb, yc;
      retnet::linear<float, 3>(x, {&pa, &pb, &pc}, {&ya, &yb, &yc});
      expect_matches_loops(x, a, ya, 1e-6);
      expect_matches_loops(x, b, yb, 1e-6);
      expect_matches_loops(x, c, yc, 1e-6);
    }
  }
  retnet::set_num_threads(before);
}

TEST(Linear, ReusesTheOutputBuffer) {
  std::mt19937 rng(5);
  const auto x = random_matrix<float>(4, 64, rng);
  const retnet::LinearWeight<float> w(random_matrix<float>(32, 64, rng));
  Matrix<float> y;
  retnet::linear(x, w, y);
  const float* data = y.data();
  retnet::linear(x, w, y);
  EXPECT_EQ(y.data(), data);
}

TEST(ParallelFor, RunsEveryIndexOnceAndRethrowsABodysException) {
  std::vector<int> hits(100, 0);
  retnet::parallel_for(100, [&](Index i) { hits[static_cast<size_t>(i)] += 1; });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 100);
  // Thrown on whichever thread ran that index: caught there, rethrown on the caller's.
  EXPECT_THROW(retnet::parallel_for(100,
                                    [&](Index i) {
                                      if (i == 37) throw std::bad_alloc();
                                    }),
               std::bad_alloc);
}

}  // namespace
