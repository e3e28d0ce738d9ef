// Test helper: the one numeric comparison the tests use, written so that a broken result can
// never pass. `EXPECT_LE(relative_error(a, b), tol)` fails when a or b holds a NaN or an
// infinity anywhere, or when their shapes differ: the error is then +infinity. (A plain
// std::max(error, NaN) keeps the old value, so NaN logits used to pass every fixture.)
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "retnet/core/tensor.hpp"

namespace retnet::testing {

namespace detail {

template <typename T, typename = void>
struct HasRowsAndCols : std::false_type {};
template <typename T>
struct HasRowsAndCols<T, std::void_t<decltype(std::declval<const T&>().rows()),
                                     decltype(std::declval<const T&>().cols())>> : std::true_type {
};

/// Same shape: rows and columns for Eigen matrices and blocks, every dimension for tensors.
template <typename A, typename B>
bool same_shape(const A& a, const B& b) {
  if constexpr (HasRowsAndCols<A>::value && HasRowsAndCols<B>::value) {
    return a.rows() == b.rows() && a.cols() == b.cols();
  } else if constexpr (!HasRowsAndCols<A>::value && !HasRowsAndCols<B>::value) {
    if (a.dimensions().size() != b.dimensions().size()) return false;
    for (size_t i = 0; i < size_t(a.dimensions().size()); ++i)
      if (a.dimensions()[i] != b.dimensions()[i]) return false;
    return true;
  } else {
    return false;  // a matrix against a tensor: a test bug, never a match
  }
}

/// Element i: row-major order for Eigen matrices and any block or expression of one, storage
/// order for tensors (whose shapes were checked equal).
template <typename T>
double element(const T& t, Index i) {
  if constexpr (HasRowsAndCols<T>::value)
    return static_cast<double>(t(i / t.cols(), i % t.cols()));
  else
    return static_cast<double>(t.data()[i]);
}

}  // namespace detail

/// max |a - reference| / max(floor, max |reference|); the plain maximum difference when that
/// denominator is 0 (both empty, or an all-zero reference with floor 0). +infinity when the
/// shapes differ or any element of either argument is NaN or infinite.
template <typename TensorA, typename TensorB>
double relative_error(const TensorA& a, const TensorB& reference, double floor = 0.0) {
  constexpr double kFail = std::numeric_limits<double>::infinity();
  if (!detail::same_shape(a, reference) || a.size() != reference.size()) return kFail;
  double num = 0, den = floor;
  for (Index i = 0; i < reference.size(); ++i) {
    const double x = detail::element(a, i), r = detail::element(reference, i);
    if (!std::isfinite(x) || !std::isfinite(r)) return kFail;
    num = std::max(num, std::abs(x - r));
    den = std::max(den, std::abs(r));
  }
  return den == 0 ? num : num / den;
}

}  // namespace retnet::testing
