// How a product y = x Wᵀ is cut into work: into depth slices and blocks of rows, so that what a
// kernel reads again stays in cache, and into shares of W's panels, one per thread.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>

#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"
#include "retnet/ops/bf16_dots.hpp"
#include "retnet/ops/float16_decode.hpp"
#include "retnet/ops/int8_dots.hpp"
#include "retnet/ops/int8_product.hpp"
#include "retnet/ops/linear_weight.hpp"
#include "retnet/ops/panel_kernel.hpp"
#include "retnet/ops/quantize.hpp"
#include "retnet/ops/weight_type.hpp"

namespace retnet {
namespace detail {

/// x rounded once per product for the weights that ask for it, in storage the calling thread
/// keeps (so that decoding allocates nothing once it has seen its largest x).
struct RoundedInputs {
  Int8Rows int8;  // for q8/q4 weights
  Bf16Rows bf16;  // for bf16 weights with bf16 dots
};

#ifdef RETNET_BF16_DOTS
/// One slice of panel_product on vdpbf16ps: rows [i0, i0 + rows) of x's bfloat16 codes times
/// positions [q0, q0 + depth) of panel `panel`. One row pairs the panel's rows in registers as it
/// reads them; more rows pair them into a tile once for all their blocks (the same pairs, so
/// the results agree bit for bit).
inline void bf16_dots_slice(const Bf16Rows& x, Index i0, Index rows, const uint8_t* panel, Index q0,
                            Index depth, float* y, Index ys, Index cols) {
  using Kernel = Bf16Product;
  const Kernel::PanelPairs pairs{reinterpret_cast<const uint16_t*>(panel) + q0 * Kernel::kWidth,
                                 depth};
  const uint16_t* x0 = x.codes.data() + i0 * x.stride + q0;
  const Index count = (depth + 1) / 2;
  if (rows == 1) return Kernel::block<1>(x0, x.stride, pairs, count, y, ys, cols, q0 > 0);
  alignas(64) uint32_t tile[64 * Kernel::kWidth];  // depth <= 128: 64 pairs
  const Kernel::TilePairs tiled = Kernel::write_tile(pairs, tile);
  for_row_blocks<Kernel::kRows>(0, rows, [&](auto mr, Index i) {
    Kernel::block<decltype(mr)::value>(x0 + i * x.stride, x.stride, tiled, count, y + i * ys, ys,
                                       cols, q0 > 0);
  });
}
#endif

/// Columns [kWidth·first_panel, kWidth·end_panel) of y = x Wᵀ on the calling thread; `rounded`
/// is x rounded for a q8/q4 W, or for a bf16 W with bf16 dots, else unused.
///
/// Sums run kDepth values of q at a time, each depth slice's sum added to y: the panel's
/// [kDepth][48] slice (24 KiB for float) stays in L1 while a block of kRowBlock rows of x passes
/// it. Few rows (decoding) take each panel's slices in turn, so W is read front to back once;
/// many rows (prompts) take, per block of rows, each panel's slices in turn too, so that the
/// block's [kRowBlock][48] outputs (48 KiB) stay in cache while they accumulate (a 256 x 32000
/// block of logits would not) and x's block (at most a few hundred KiB) stays in L2. Either way
/// a row's sum is the same chain, so y's rows do not depend on how many rows x has.
template <typename Scalar>
void panel_product(const Matrix<Scalar>& x, const RoundedInputs& rounded,
                   const LinearWeight<Scalar>& w, Scalar* y, Index ys, Index first_panel,
                   Index end_panel, bool integer_dots) {
  using Kernel = PanelKernel<Scalar>;
  constexpr Index kWidth = Kernel::kWidth, kDepth = 128, kRowBlock = 256;
  const Index m = x.rows(), k = x.cols(), n = w.rows();
  alignas(64) Scalar scratch[kDepth * kWidth];  // a decoded tile of an f16 or bf16 panel
  const bool few_rows = m <= 2 * Kernel::kRows;
  const Scalar* x_rows = x.data();  // x, or x rounded to bfloat16 for the float kernel
  if constexpr (std::is_same_v<Scalar, float>) {
    if (w.bf16_dots() && !kHasBf16Dots) x_rows = rounded.bf16.values.data();
  }
  const auto slice = [&](Index p, Index q0, Index i0, Index rows) {
    const Index c0 = p * kWidth, depth = std::min(kDepth, k - q0), cols = std::min(kWidth, n - c0);
    Scalar* yp = y + i0 * ys + c0;
    if constexpr (std::is_same_v<Scalar, float>) {
#ifdef RETNET_BF16_DOTS
      if (w.bf16_dots())
        return bf16_dots_slice(rounded.bf16, i0, rows, w.packed_panel(p), q0, depth, yp, ys, cols);
#endif
      if (is_block_quantised(w.type()))
        return Int8Product::run(rounded.int8, i0, i0 + rows, w.type(), w.packed_panel(p),
                                q0 / kQuantBlock, quant_blocks(q0 + depth), yp, ys, cols,
                                integer_dots);
    }
    const auto multiply = [&](const auto& panel_rows) {
      Kernel::rows_times_panel(x_rows + i0 * k + q0, k, rows, panel_rows, depth, yp, ys, cols,
                               q0 > 0, !few_rows);
    };
    // One row of x reads an f16 or bf16 panel decoding each row in registers, in one pass with the
    // loads from memory; more rows decode a tile once for all their blocks (with the decoding in
    // the loop, GCC 12 keeps a block's accumulators on the stack). Both decode the same values, so
    // the results agree bit for bit.
    if constexpr (std::is_same_v<Scalar, float>) {
      if (m == 1 && w.type() == WeightType::kBF16)
        return multiply(Float16Rows<WeightType::kBF16>{w.packed_panel(p), q0});
      if (m == 1 && w.type() == WeightType::kF16)
        return multiply(Float16Rows<WeightType::kF16>{w.packed_panel(p), q0});
    }
    const Scalar* tile = w.tile(p, q0, depth, scratch);
    if (few_rows && w.type() == WeightType::kF32)
      return multiply(typename Kernel::template ScalarRows<true>{tile});
    multiply(typename Kernel::template ScalarRows<false>{tile});
  };
  if (few_rows) {
    for (Index p = first_panel; p < end_panel; ++p)
      for (Index q0 = 0; q0 < k; q0 += kDepth) slice(p, q0, 0, m);
  } else {
    for (Index i0 = 0; i0 < m; i0 += kRowBlock)
      for (Index p = first_panel; p < end_panel; ++p)
        for (Index q0 = 0; q0 < k; q0 += kDepth) slice(p, q0, i0, std::min(kRowBlock, m - i0));
  }
  if (k == 0)  // no products to accumulate: y is zero
    for (Index i = 0; i < m; ++i)
      std::fill(y + i * ys + first_panel * kWidth, y + i * ys + std::min(n, end_panel * kWidth),
                Scalar(0));
}

/// Share t of a weight's panels, of `shares`: [edge(t), edge(t + 1)).
template <typename Scalar>
Index panel_edge(const LinearWeight<Scalar>& w, Index shares, Index t) {
  return w.panels() * t / shares;
}

/// y_i = x W_iᵀ for i < count (weight_of(i) is W_i, output_of(i) is y_i, already shaped): the
/// panels are cut into a few shares per thread, and a share is that part of every product in
/// turn, all in one parallel_for, so W is read once in all and the threads meet once whatever
/// the count: at decode sizes a parallel_for per product leaves threads waiting at each.
template <typename Scalar, typename WeightOf, typename OutputOf>
void sliced_products(const Matrix<Scalar>& x, size_t count, WeightOf weight_of, OutputOf output_of,
                     bool integer_dots = kHasInt8Dots) {
  thread_local RoundedInputs storage;
  RoundedInputs& rounded = storage;  // the lambda below must see this thread's, not a worker's
  if constexpr (std::is_same_v<Scalar, float>) {
    bool quantised = false, bf16_dots = false;
    for (size_t i = 0; i < count; ++i) {
      quantised |= is_block_quantised(weight_of(i).type());
      bf16_dots |= weight_of(i).bf16_dots();
    }
    if (quantised) rounded.int8.assign(x.data(), x.rows(), x.cols(), !integer_dots);
    if (bf16_dots) rounded.bf16.assign(x.data(), x.rows(), x.cols(), !kHasBf16Dots);
  }
  const auto run = [&](Index t, Index shares) {
    for (size_t i = 0; i < count; ++i) {
      const LinearWeight<Scalar>& w = weight_of(i);
      auto&& y = output_of(i);
      const Index begin = panel_edge(w, shares, t), end = panel_edge(w, shares, t + 1);
      if (end > begin)
        panel_product<Scalar>(x, rounded, w, y.data(), y.outerStride(), begin, end, integer_dots);
    }
  };
  const int threads = num_threads();
  // The bytes read decide the split (parallel_pieces keeps every share above kMinBytesPerPiece).
  size_t weight_bytes = 0;
  Index most_panels = 0;
  for (size_t i = 0; i < count; ++i) {
    weight_bytes += weight_of(i).stored_bytes();
    most_panels = std::max(most_panels, weight_of(i).panels());
  }
  const Index shares = threads > 1 && most_panels > 0
                           ? parallel_pieces(most_panels, threads, weight_bytes / most_panels)
                           : 1;
  if (shares > 1)
    parallel_for(shares, [&](Index t) { run(t, shares); });
  else
    run(0, 1);
}

}  // namespace detail
}  // namespace retnet
