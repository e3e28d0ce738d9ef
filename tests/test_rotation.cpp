// ops/rotation.hpp: the rotation of queries and keys (docs/NUMERICS.md#multi-scale-retention)
// against the formulas evaluated in long double:
//   kPairs:  pair (2i, 2i+1) turns by n·angle_i, angle_i = 1 / 10000^(i / (dk/2 - 1))
//            (angle_0 = 1 when dk = 2)
//   kHalves: pair (i, i + dk/2) turns by n·theta_i, theta_i = 10000^(-2i/dk)
//   (a, b) -> (a cos - b sin, b cos + a sin)
// Tolerances: angles 1e-15 relative; the table's cos and sin 1e-15 + n·4e-16 absolute in double
// (the phase n·angle carries the angle's rounding times n), the same plus half a float ulp in
// float; the rotated values 1e-14 (double) and 1e-6 (float) relative to the vector's size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "retnet/ops/rotation.hpp"

namespace {

using retnet::Index;
using retnet::RotationLayout;
using retnet::RotationTable;

long double angle_by_formula(RotationLayout layout, Index i, Index dk) {
  const Index pairs = dk / 2;
  if (layout == RotationLayout::kHalves) return std::pow(10000.0L, -2.0L * i / dk);
  if (pairs == 1) return 1.0L;
  return 1.0L / std::pow(10000.0L, (long double)i / (pairs - 1));
}

const std::vector<int64_t> kPositions = {0, 1, 2, 7, 100, 4095, 123456, 10000000};

TEST(Rotation, AnglesFollowTheFormula) {
  for (RotationLayout layout : {RotationLayout::kPairs, RotationLayout::kHalves})
    for (Index dk : {2, 4, 8, 64, 128})
      for (Index i = 0; i < dk / 2; ++i) {
        const long double expected = angle_by_formula(layout, i, dk);
        EXPECT_NEAR(retnet::rotation_angle(layout, i, dk / 2), double(expected), 1e-15 * expected)
            << int(layout) << " dk=" << dk << " i=" << i;
      }
  // The ends of torch.linspace(0, 1, dk/2): the first pair turns by 1, the last by 1e-4.
  EXPECT_EQ(retnet::rotation_angle(RotationLayout::kPairs, 0, 32), 1.0);
  EXPECT_NEAR(retnet::rotation_angle(RotationLayout::kPairs, 31, 32), 1e-4, 1e-19);
  EXPECT_NEAR(retnet::rotation_angle(RotationLayout::kHalves, 1, 32), std::pow(10000.0, -1.0 / 32),
              1e-16);
}

template <typename Scalar>
void check_table(double extra) {
  for (RotationLayout layout : {RotationLayout::kPairs, RotationLayout::kHalves})
    for (Index dk : {2, 6, 16}) {
      RotationTable<Scalar> table;
      table.compute(kPositions, dk, layout);
      ASSERT_EQ(table.cos.rows(), Index(kPositions.size()));
      ASSERT_EQ(table.cos.cols(), dk / 2);
      ASSERT_EQ(table.sin.cols(), dk / 2);
      for (size_t r = 0; r < kPositions.size(); ++r)
        for (Index i = 0; i < dk / 2; ++i) {
          const long double phase = kPositions[r] * angle_by_formula(layout, i, dk);
          const double tolerance = 1e-15 + double(kPositions[r]) * 4e-16 + extra;
          EXPECT_NEAR(double(table.cos(Index(r), i)), double(std::cos(phase)), tolerance)
              << "n=" << kPositions[r] << " i=" << i;
          EXPECT_NEAR(double(table.sin(Index(r), i)), double(std::sin(phase)), tolerance)
              << "n=" << kPositions[r] << " i=" << i;
        }
    }
}

TEST(RotationTable, CosinesAndSinesOfEveryPositionInDouble) {
  check_table<double>(0.0);
}
TEST(RotationTable, CosinesAndSinesOfEveryPositionInFloat) {
  check_table<float>(6e-8);  // the rounding of a double in [-1, 1] to float
}

// rotate() against the 2 × 2 rotation written out, for every pair layout and position.
template <typename Scalar>
void check_rotate(double tolerance) {
  std::mt19937 rng(23);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (RotationLayout layout : {RotationLayout::kPairs, RotationLayout::kHalves})
    for (Index dk : {2, 8, 32}) {
      RotationTable<Scalar> table;
      table.compute(kPositions, dk, layout);
      std::vector<Scalar> z(static_cast<size_t>(dk)), out(static_cast<size_t>(dk));
      for (size_t r = 0; r < kPositions.size(); ++r) {
        for (Scalar& v : z) v = Scalar(normal(rng));
        table.rotate(z.data(), Index(r), dk, out.data());
        std::vector<long double> expected(static_cast<size_t>(dk));
        for (Index i = 0; i < dk / 2; ++i) {
          const Index first = layout == RotationLayout::kPairs ? 2 * i : i;
          const Index second = layout == RotationLayout::kPairs ? 2 * i + 1 : i + dk / 2;
          const long double phase = kPositions[r] * angle_by_formula(layout, i, dk);
          const long double a = z[size_t(first)], b = z[size_t(second)];
          expected[size_t(first)] = a * std::cos(phase) - b * std::sin(phase);
          expected[size_t(second)] = b * std::cos(phase) + a * std::sin(phase);
        }
        long double size = 0;
        for (Scalar v : z) size = std::max<long double>(size, std::abs(v));
        const double allowed = (tolerance + double(kPositions[r]) * 8e-16) * double(size);
        for (Index e = 0; e < dk; ++e)
          EXPECT_NEAR(double(out[size_t(e)]), double(expected[size_t(e)]), allowed)
              << int(layout) << " dk=" << dk << " n=" << kPositions[r] << " e=" << e;
      }
    }
}

TEST(RotationTable, RotateMatchesTheFormulaInDouble) {
  check_rotate<double>(1e-14);
}
TEST(RotationTable, RotateMatchesTheFormulaInFloat) {
  check_rotate<float>(1e-6);
}

// Which coordinates pair up: a unit vector on coordinate 0 turns into coordinate 1 (pairs) or
// coordinate dk/2 (halves), by sin(n·angle_0) = sin(n); position 0 is the identity, exactly.
TEST(RotationTable, PairsAndHalvesTurnDifferentCoordinates) {
  const Index dk = 8;
  for (RotationLayout layout : {RotationLayout::kPairs, RotationLayout::kHalves}) {
    RotationTable<double> table;
    table.compute({0, 3}, dk, layout);
    const std::vector<double> unit = {1, 0, 0, 0, 0, 0, 0, 0};
    std::vector<double> out(dk);
    table.rotate(unit.data(), 0, dk, out.data());
    EXPECT_EQ(out, unit);
    table.rotate(unit.data(), 1, dk, out.data());
    const Index partner = layout == RotationLayout::kPairs ? 1 : dk / 2;
    for (Index e = 0; e < dk; ++e) {
      const double expected = e == 0 ? std::cos(3.0) : e == partner ? std::sin(3.0) : 0.0;
      EXPECT_NEAR(out[size_t(e)], expected, 1e-15) << int(layout) << " e=" << e;
    }
  }
}

// What the rotation is for: the product of a query rotated at n and a key rotated at m depends
// on n - m only.
TEST(RotationTable, DotProductsDependOnTheDistanceOnly) {
  const Index dk = 16;
  std::mt19937 rng(29);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> q(dk), k(dk), qr(dk), kr(dk);
  for (double& v : q) v = normal(rng);
  for (double& v : k) v = normal(rng);
  for (RotationLayout layout : {RotationLayout::kPairs, RotationLayout::kHalves}) {
    RotationTable<double> table;
    table.compute({5, 2, 1005, 1002}, dk, layout);
    double dots[2];
    for (int j = 0; j < 2; ++j) {
      table.rotate(q.data(), 2 * j, dk, qr.data());
      table.rotate(k.data(), 2 * j + 1, dk, kr.data());
      dots[j] = 0;
      for (Index e = 0; e < dk; ++e) dots[j] += qr[size_t(e)] * kr[size_t(e)];
    }
    EXPECT_NEAR(dots[0], dots[1], 1e-11) << int(layout);
  }
}

}  // namespace
