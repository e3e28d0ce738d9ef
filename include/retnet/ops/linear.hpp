// Linear maps y = x Wᵀ (PyTorch's layout, W [out, in]) for every projection of the model, with W
// stored in panels so that one kernel serves a decode step (1-16 rows of x, bound by reading W)
// and a prompt (thousands of rows, bound by multiply-adds).
#pragma once

#include <algorithm>
#include <array>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"

namespace retnet {

/// W [rows, cols] stored as panels of kPanelRows consecutive rows, each panel transposed:
///   panel p is [cols][kPanelRows], its element (q, r) = W[kPanelRows·p + r, q],
/// with the last panel padded by zero rows. A product reads a panel front to back (one sequential
/// stream per thread, which the hardware prefetcher follows) and turns each input value x[i, q]
/// into 48 multiply-adds against one panel row: the 48 outputs stay in SIMD registers, with no
/// horizontal sums, where PyTorch's row-major layout needs a sum across SIMD lanes per output
/// (benchmarks/bench_kernels.cpp compares the two: BM_DecodeProduct).
template <typename Scalar>
class LinearWeight {
 public:
  static constexpr Index kPanelRows = 48;

  LinearWeight() = default;
  LinearWeight(Index rows, Index cols) { resize(rows, cols); }
  explicit LinearWeight(const Matrix<Scalar>& w) {
    assign(w.rows(), w.cols(),
           [&](Scalar* row_major) { MatrixMap<Scalar>(row_major, w.rows(), w.cols()) = w; });
  }

  /// Shape [rows, cols], all zero.
  void resize(Index rows, Index cols) {
    RETNET_REQUIRE(rows >= 0 && cols >= 0, "LinearWeight: negative shape");
    rows_ = rows, cols_ = cols;
    data_.setZero(panels() * kPanelRows * cols);
  }

  /// Shape [rows, cols] with the values fill(p) writes to p in row-major order (a checkpoint
  /// reader, say). The rows of a panel are contiguous in row-major order too, so each panel is
  /// transposed in place through one panel of scratch: no second copy of W is ever held.
  template <typename Fill>
  void assign(Index rows, Index cols, Fill&& fill) {
    RETNET_REQUIRE(rows >= 0 && cols >= 0, "LinearWeight: negative shape");
    rows_ = rows, cols_ = cols;
    data_.resize(panels() * kPanelRows * cols);  // fill writes all but the padding rows
    fill(data_.data());
    std::fill(data_.data() + rows * cols, data_.data() + data_.size(), Scalar(0));
    Matrix<Scalar> rows_of_panel(kPanelRows, cols);
    for (Index p = 0; p < panels(); ++p) {
      Scalar* panel = data_.data() + p * kPanelRows * cols;
      rows_of_panel = ConstMatrixMap<Scalar>(panel, kPanelRows, cols);
      MatrixMap<Scalar>(panel, cols, kPanelRows) = rows_of_panel.transpose();
    }
  }

  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index size() const { return rows_ * cols_; }
  Index panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  const Scalar* panel(Index p) const { return data_.data() + p * kPanelRows * cols_; }

  /// out[q] = W[r, q] for q < cols (a row of a tied embedding).
  void copy_row(Index r, Scalar* out) const {
    RETNET_REQUIRE(r >= 0 && r < rows_, "LinearWeight: row out of range");
    const Scalar* p = panel(r / kPanelRows) + r % kPanelRows;
    for (Index q = 0; q < cols_; ++q) out[q] = p[q * kPanelRows];
  }

  Matrix<Scalar> to_matrix() const {
    Matrix<Scalar> w(rows_, cols_);
    for (Index r = 0; r < rows_; ++r) copy_row(r, w.row(r).data());
    return w;
  }

 private:
  Index rows_ = 0, cols_ = 0;
  Vector<Scalar> data_;
};

namespace detail {

template <typename Scalar>
void check_input(const Matrix<Scalar>& x, const LinearWeight<Scalar>& w) {
  RETNET_REQUIRE(x.cols() == w.cols(), "linear: x has " + std::to_string(x.cols()) +
                                           " columns, the weight " + std::to_string(w.cols()));
}

template <typename Scalar>
struct PanelKernel {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr Index kLanes = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr Index kWidth = LinearWeight<Scalar>::kPanelRows;
  static_assert(kWidth % kLanes == 0, "a panel row must be whole SIMD packets");
  static constexpr int kPackets = static_cast<int>(kWidth / kLanes);
  /// Rows of x per block: about 24 accumulators, which with the panel row's packets fit the 32
  /// registers of AVX-512 (8 rows x 3 packets for float).
  static constexpr int kRows = kPackets >= 24 ? 1 : 24 / kPackets;

  /// y[i, c] (+)= Σ_{q < k} x[i, q] · panel[q, c] for i < MR, c < cols (<= kWidth): each step
  /// loads one panel row and broadcasts MR values of x against it.
  template <int MR>
  static void block(const Scalar* x, Index xs, const Scalar* panel, Index k, Scalar* y, Index ys,
                    Index cols, bool accumulate) {
    namespace ei = Eigen::internal;
    // Few rows give too few independent sums to hide the multiply-add latency: then S
    // interleaved steps of q keep sums of their own, added at the end.
    constexpr int S = MR >= 4 ? 1 : 4 / MR;
    Packet acc[S][MR][kPackets];
    for (auto& split : acc)
      for (auto& row : split)
        for (auto& a : row) a = ei::pset1<Packet>(Scalar(0));
    const auto step = [&](int s, Index q, const Scalar* panel_row) {
      Packet w[kPackets];
      for (int j = 0; j < kPackets; ++j) w[j] = ei::ploadu<Packet>(panel_row + j * kLanes);
      for (int i = 0; i < MR; ++i) {
        const Packet xb = ei::pset1<Packet>(x[i * xs + q]);
        for (int j = 0; j < kPackets; ++j) acc[s][i][j] = ei::pmadd(xb, w[j], acc[s][i][j]);
      }
    };
    Index q = 0;
    for (; q + S <= k; q += S, panel += S * kWidth)
      for (int s = 0; s < S; ++s) step(s, q + s, panel + s * kWidth);
    for (; q < k; ++q, panel += kWidth) step(0, q, panel);
    for (int s = 1; s < S; ++s)
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < kPackets; ++j) acc[0][i][j] = ei::padd(acc[0][i][j], acc[s][i][j]);
    for (int i = 0; i < MR; ++i) {
      Scalar* yi = y + i * ys;
      if (cols == kWidth) {
        for (int j = 0; j < kPackets; ++j) {
          Packet v = acc[0][i][j];
          if (accumulate) v = ei::padd(v, ei::ploadu<Packet>(yi + j * kLanes));
          ei::pstoreu(yi + j * kLanes, v);
        }
      } else {  // the zero-padded last panel: keep the valid columns
        Scalar out[kWidth];
        for (int j = 0; j < kPackets; ++j) ei::pstoreu(out + j * kLanes, acc[0][i][j]);
        for (Index c = 0; c < cols; ++c) yi[c] = accumulate ? yi[c] + out[c] : out[c];
      }
    }
  }

  /// `block` over m rows of x: blocks of MR rows, the remainder by halves of MR.
  template <int MR>
  static void rows(const Scalar* x, Index xs, Index m, const Scalar* panel, Index k, Scalar* y,
                   Index ys, Index cols, bool accumulate) {
    Index i = 0;
    for (; i + MR <= m; i += MR)
      block<MR>(x + i * xs, xs, panel, k, y + i * ys, ys, cols, accumulate);
    if constexpr (MR > 1) {
      if (i < m) rows<MR / 2>(x + i * xs, xs, m - i, panel, k, y + i * ys, ys, cols, accumulate);
    }
  }
};

/// Columns [kWidth·first_panel, kWidth·end_panel) of y = x Wᵀ on the calling thread.
///
/// Few rows (decoding, m <= 2 blocks): each panel is read once, front to back, for all rows.
/// Many rows (prompts), blocked as a GEMM is: kDepth values of q at a time, so that the panel's
/// [kDepth][48] slice (24 KiB for float) stays in L1 while blocks of kRowBlock rows of x (128
/// KiB, in L2) pass it; partial sums accumulate in y.
template <typename Scalar>
void panel_product(const Matrix<Scalar>& x, const LinearWeight<Scalar>& w, Scalar* y, Index ys,
                   Index first_panel, Index end_panel) {
  using Kernel = PanelKernel<Scalar>;
  constexpr Index kWidth = Kernel::kWidth, kDepth = 128, kRowBlock = 256;
  const Index m = x.rows(), k = x.cols(), n = w.rows();
  const bool few_rows = m <= 2 * Kernel::kRows;
  const Index depth_step = few_rows ? std::max<Index>(k, 1) : kDepth;
  const Index row_step = few_rows ? std::max<Index>(m, 1) : kRowBlock;
  for (Index q0 = 0; q0 < k; q0 += depth_step) {
    const Index depth = std::min(depth_step, k - q0);
    for (Index i0 = 0; i0 < m; i0 += row_step) {
      const Index rows = std::min(row_step, m - i0);
      for (Index p = first_panel; p < end_panel; ++p) {
        const Index c0 = p * kWidth;
        Kernel::template rows<Kernel::kRows>(x.data() + i0 * k + q0, k, rows,
                                             w.panel(p) + q0 * kWidth, depth, y + i0 * ys + c0, ys,
                                             std::min(kWidth, n - c0), q0 > 0);
      }
    }
  }
  if (k == 0)  // no products to accumulate: y is zero
    for (Index i = 0; i < m; ++i)
      std::fill(y + i * ys + first_panel * kWidth, y + i * ys + std::min(n, end_panel * kWidth),
                Scalar(0));
}

/// Thread t's share of a weight's panels: [edge(t), edge(t + 1)). Below 256 rows of W thread 0
/// takes everything, since a share would be smaller than the cost of splitting.
template <typename Scalar>
Index panel_edge(const LinearWeight<Scalar>& w, Index threads, Index t) {
  if (w.rows() < 256) return t == 0 ? 0 : w.panels();
  return w.panels() * t / threads;
}

/// y_i = x W_iᵀ for i < count (weight_of(i) is W_i, output_of(i) is y_i, already shaped): each
/// thread computes its share of the panels of every product in turn, in one parallel region, so
/// W is read once in all and the threads meet once whatever the count: at decode sizes a region
/// per product leaves one thread waiting at the end of each.
template <typename Scalar, typename WeightOf, typename OutputOf>
void sliced_products(const Matrix<Scalar>& x, size_t count, WeightOf weight_of,
                     OutputOf output_of) {
  const auto run = [&](Index t, Index threads) {
    for (size_t i = 0; i < count; ++i) {
      const LinearWeight<Scalar>& w = weight_of(i);
      auto&& y = output_of(i);
      const Index begin = panel_edge(w, threads, t), end = panel_edge(w, threads, t + 1);
      if (end > begin) panel_product<Scalar>(x, w, y.data(), y.outerStride(), begin, end);
    }
  };
#ifdef _OPENMP
  const Index threads = num_threads();
  bool worth_splitting = false;
  for (size_t i = 0; i < count; ++i) worth_splitting |= weight_of(i).rows() >= 256;
  if (threads > 1 && worth_splitting && !omp_in_parallel()) {
    parallel_for(threads, [&](Index t) { run(t, threads); });
    return;
  }
#endif
  run(0, 1);
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
