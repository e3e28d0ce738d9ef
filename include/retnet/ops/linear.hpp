// Linear maps y = x Wᵀ (PyTorch's layout, W [out, in]) for every projection of the model, with W
// stored in panels so that one kernel serves a decode step (1-16 rows of x, bound by reading W)
// and a prompt (thousands of rows, bound by multiply-adds). This header is the entry point; the
// parts, format first, then how each CPU multiplies it:
//   ops/weight_type.hpp    the weight types (f32, f16, bf16, q8, q4) and their names
//   ops/quantize.hpp       q8/q4 blocks: the stored form, quantisation, x rounded to int8
//   ops/panel_format.hpp   the bytes of a panel, per weight type
//   ops/linear_weight.hpp  LinearWeight: W in panels
//   ops/panel_kernel.hpp   the float kernel (f32 panels, decoded f16/bf16: ops/float16_decode.hpp)
//   ops/int8_product.hpp   the q8/q4 kernels, on each CPU's int8 dot products (ops/int8_dots.hpp)
//   ops/bf16_dots.hpp      bf16 products over x rounded to bfloat16 (vdpbf16ps, AVX512-BF16)
//   ops/prefetch.hpp       how far ahead, and into which cache, a kernel asks for W's bytes
//   ops/panel_product.hpp  a product cut into slices for the caches and shares for the threads
#pragma once

#include <array>
#include <string>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/ops/linear_weight.hpp"
#include "retnet/ops/panel_product.hpp"

namespace retnet {

namespace detail {

template <typename Scalar>
void check_input(const Matrix<Scalar>& x, const LinearWeight<Scalar>& w) {
  RETNET_REQUIRE(x.cols() == w.cols(), "linear: x has " + std::to_string(x.cols()) +
                                           " columns, the weight " + std::to_string(w.cols()));
}

}  // namespace detail

/// y = x Wᵀ, written into y, which must already be [x.rows(), W.rows()] (it may be a block of a
/// larger matrix: a segment's rows of all the logits, say). With several threads, each thread
/// computes the outputs of its own share of W's panels, so W is read once in all and no thread
/// waits on another inside the product.
template <typename Scalar>
void linear(const Matrix<Scalar>& x, const LinearWeight<Scalar>& weight,
            Eigen::Ref<Matrix<Scalar>> y) {
  detail::check_input(x, weight);
  RETNET_REQUIRE(y.rows() == x.rows() && y.cols() == weight.rows(),
                 "linear: output block has the wrong shape");
  detail::sliced_products<Scalar>(
      x, 1, [&](size_t) -> const LinearWeight<Scalar>& { return weight; },
      [&](size_t) -> Eigen::Ref<Matrix<Scalar>>& { return y; });
}

/// y = x Wᵀ, resizing y (no allocation when it already has the shape).
template <typename Scalar>
void linear(const Matrix<Scalar>& x, const LinearWeight<Scalar>& weight, Matrix<Scalar>& y) {
  y.resize(x.rows(), weight.rows());
  linear(x, weight, Eigen::Ref<Matrix<Scalar>>(y));
}

/// y_i = x W_iᵀ for several weights that read the same x (q, k, v and g; fc1 and gate), each
/// y_i resized, in one parallel region (detail::sliced_products).
template <typename Scalar, size_t N>
void linear(const Matrix<Scalar>& x, const std::array<const LinearWeight<Scalar>*, N>& weights,
            const std::array<Matrix<Scalar>*, N>& ys) {
  for (size_t i = 0; i < N; ++i) {
    detail::check_input(x, *weights[i]);
    ys[i]->resize(x.rows(), weights[i]->rows());
  }
  detail::sliced_products<Scalar>(
      x, N, [&](size_t i) -> const LinearWeight<Scalar>& { return *weights[i]; },
      [&](size_t i) -> Matrix<Scalar>& { return *ys[i]; });
}

}  // namespace retnet
