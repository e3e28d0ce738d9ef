// layers/ops.hpp: the products every layer is built from, against plain loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <new>
#include <random>
#include <retnet/retnet.hpp>

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

// y = x Wᵀ by the definition, in long double.
template <typename Scalar>
void expect_matches_loops(const Matrix<Scalar>& x, const Matrix<Scalar>& w, const Matrix<Scalar>& y,
                          double tolerance) {
  ASSERT_EQ(y.rows(), x.rows());
  ASSERT_EQ(y.cols(), w.rows());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < w.rows(); ++j) {
      long double sum = 0, magnitude = 0;
      for (Index k = 0; k < x.cols(); ++k) {
        sum += static_cast<long double>(x(i, k)) * w(j, k);
        magnitude += std::abs(static_cast<long double>(x(i, k)) * w(j, k));
      }
      // Relative to the sum of |terms|: the bound a reordered float summation can meet.
      ASSERT_NEAR(double(y(i, j)), double(sum), tolerance * double(magnitude + 1))
          << "row " << i << ", column " << j << " of a " << x.rows() << "x" << x.cols() << " times "
          << w.cols() << "x" << w.rows() << " product";
    }
}

template <typename Scalar>
void check_shapes(double tolerance) {
  std::mt19937 rng(7);
  // Every row count of the few-rows kernel (1..16: groups of 8 rows summed by the lane_sums
  // tree, then pairs, an odd last row) and the GEMM above it; inner sizes that are and are not
  // multiples of the SIMD width; output sizes below, at and past the 2-row blocks of W, the
  // prefetch distance and the 256-row threading threshold. (Swapping two lanes of the tree's
  // output order fails this test and the next.)
  for (Index rows = 1; rows <= 17; ++rows)
    for (Index inner : {1, 5, 16, 33, 100})
      for (Index out : {1, 6, 13, 19, 300}) {
        const auto x = random_matrix<Scalar>(rows, inner, rng);
        const auto w = random_matrix<Scalar>(out, inner, rng);
        Matrix<Scalar> y;
        retnet::linear(x, w, y);
        expect_matches_loops(x, w, y, tolerance);
      }
}

TEST(Linear, FloatMatchesLoopsForEveryRowCount) {
  check_shapes<float>(1e-6);
}
TEST(Linear, DoubleMatchesLoopsForEveryRowCount) {
  check_shapes<double>(1e-14);
}

TEST(Linear, SameResultWithOneAndTwoThreads) {
  std::mt19937 rng(3);
  const auto x = random_matrix<float>(8, 512, rng);
  const auto w = random_matrix<float>(1000, 512, rng);
  Matrix<float> one, two;
  const int before = retnet::num_threads();
  retnet::set_num_threads(1);
  retnet::linear(x, w, one);
  retnet::set_num_threads(2);
  retnet::linear(x, w, two);
  retnet::set_num_threads(before);
  // Each output is one dot product computed the same way whichever thread owns its column.
  EXPECT_EQ(one, two);
}

TEST(Linear, TwoThreadSlicesMatchLoops) {
  // Both paths split W's rows between threads (slice edges on multiples of 16 columns): the
  // few-rows kernel and the per-slice GEMM, with output sizes that do and do not divide evenly.
  std::mt19937 rng(11);
  const int before = retnet::num_threads();
  retnet::set_num_threads(2);
  for (Index rows : {3, 16, 17, 90})
    for (Index out : {256, 300, 1001}) {
      const auto x = random_matrix<float>(rows, 70, rng);
      const auto w = random_matrix<float>(out, 70, rng);
      Matrix<float> y;
      retnet::linear(x, w, y);
      expect_matches_loops(x, w, y, 1e-6);
    }
  retnet::set_num_threads(before);
}

TEST(Linear, SeveralWeightsInOneRegionMatchLoops) {
  // linear over several weights (q, k, v, g in one parallel region): each product checked
  // against loops, with weights below the 256-row threading threshold (thread 0 alone), above
  // it, and not a multiple of 16; few rows and GEMM rows; one and two threads.
  std::mt19937 rng(13);
  const int before = retnet::num_threads();
  for (int threads : {1, 2}) {
    retnet::set_num_threads(threads);
    for (Index rows : {1, 8, 40}) {
      const auto x = random_matrix<float>(rows, 48, rng);
      const auto a = random_matrix<float>(100, 48, rng);
      const auto b = random_matrix<float>(300, 48, rng);
      const auto c = random_matrix<float>(517, 48, rng);
      Matrix<float> ya, yb, yc;
      retnet::linear<float, 3>(x, {&a, &b, &c}, {&ya, &yb, &yc});
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
  const auto w = random_matrix<float>(32, 64, rng);
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
  // Thrown inside the OpenMP region, which it may not leave: caught there, rethrown after.
  EXPECT_THROW(retnet::parallel_for(100,
                                    [&](Index i) {
                                      if (i == 37) throw std::bad_alloc();
                                    }),
               std::bad_alloc);
}

}  // namespace
