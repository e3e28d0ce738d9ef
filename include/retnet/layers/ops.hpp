// Row-wise building blocks shared by the layers. Activations are row-major [rows, features]
// matrices, one row per (batch entry, position).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"
#include "retnet/model/config.hpp"

namespace retnet {

namespace detail {

/// out[s] = the sum of the lanes of acc[s], for `count` packets. The sums of 16 float packets
/// (AVX-512) come from one tree of 15 additions of half-packets (45 instructions) instead of 16
/// separate reductions (about 20 each): a decode product sums one packet per output, every
/// 32-54 multiply-adds on the base config, so the reduction's cost shows.
template <typename Packet, typename Scalar>
void lane_sums(const Packet* acc, int count, Scalar* out) {
  namespace ei = Eigen::internal;
  constexpr int kLanes = ei::unpacket_traits<Packet>::size;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Scalar, float> && kLanes == 16) {
    if (count == 16) {
      // Level by level, each addition folds two packets' halves into one packet: after the
      // four levels lane 4q + e holds the sum of acc[kSlot[q] + kBase[e]].
      __m512 a[8], b[4], c[2];
      for (int s = 0; s < 8; ++s)  // 512 -> 256 bits: lanes 0-7 from acc[s], 8-15 from acc[s+8]
        a[s] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, acc[s], acc[s + 8], 0x44),
                             _mm512_maskz_shuffle_f32x4(0xFFFF, acc[s], acc[s + 8], 0xEE));
      for (int s = 0; s < 4; ++s)  // 256 -> 128 bits
        b[s] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, a[s], a[s + 4], 0x88),
                             _mm512_maskz_shuffle_f32x4(0xFFFF, a[s], a[s + 4], 0xDD));
      for (int s = 0; s < 2; ++s)  // 128 -> 64 bits
        c[s] =
            _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, b[s], b[s + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm512_maskz_shuffle_ps(0xFFFF, b[s], b[s + 2], _MM_SHUFFLE(3, 2, 3, 2)));
      const __m512 sums =
          _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_maskz_shuffle_ps(0xFFFF, c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, sums);
      constexpr int kSlot[4] = {0, 8, 4, 12}, kBase[4] = {0, 2, 1, 3};
      for (int q = 0; q < 4; ++q)
        for (int e = 0; e < 4; ++e) out[kSlot[q] + kBase[e]] = lanes[4 * q + e];
      return;
    }
  }
#endif
  // Lanes summed from memory: ei::predux on AVX-512 doubles trips a false GCC 12
  // -Wuninitialized inside the intrinsics header.
  Scalar lanes[kLanes];
  for (int s = 0; s < count; ++s) {
    ei::pstoreu(lanes, acc[s]);
    Scalar sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += lanes[l];
    out[s] = sum;
  }
}

/// The MR x NR block y[i, r] = x[i, :] · w[r, :] (MR rows of x, NR rows of w, length k), with
/// the MR·NR sums in SIMD registers: each packet of w loaded serves MR rows of x and each packet
/// of x serves NR rows of w. `ahead` (may be null) is a later row block of w to prefetch while
/// this one computes: the hardware prefetcher alone does not keep NR interleaved streams fed.
template <int MR, int NR, typename Scalar>
void dot_block(const Scalar* x, Index x_stride, const Scalar* w, const Scalar* ahead, Index k,
               Scalar* y, Index y_stride) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<Scalar>::type;
  constexpr Index kLanes = ei::packet_traits<Scalar>::size;
  Packet acc[MR * NR];
  for (int s = 0; s < MR * NR; ++s) acc[s] = ei::pset1<Packet>(Scalar(0));
  Index p = 0;
  for (; p + kLanes <= k; p += kLanes) {
    Packet wp[NR];
    for (int r = 0; r < NR; ++r) {
      wp[r] = ei::ploadu<Packet>(w + r * k + p);
#if defined(__GNUC__)
      if (ahead) __builtin_prefetch(ahead + r * k + p);
#endif
    }
    for (int i = 0; i < MR; ++i) {
      const Packet xp = ei::ploadu<Packet>(x + i * x_stride + p);
      for (int r = 0; r < NR; ++r) acc[i * NR + r] = ei::pmadd(xp, wp[r], acc[i * NR + r]);
    }
  }
  Scalar sums[MR * NR];
  lane_sums(acc, MR * NR, sums);
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) {
      Scalar sum = sums[i * NR + r];
      for (Index q = p; q < k; ++q) sum += x[i * x_stride + q] * w[r * k + q];
      y[i * y_stride + r] = sum;
    }
}

/// Columns [begin, end) of y = x Wᵀ for few rows of x. One row: plain dot products, one
/// sequential stream of W that the hardware prefetcher follows. More rows: blocks of 2 rows of W,
/// met by groups of 8 x rows (16 sums in registers, summed by one lane_sums tree), with the block
/// 2 blocks ahead prefetched during the first group. The shape was picked by a sweep over the
/// base config's decode matrices at batch 8: in the model's batch-8 decode step (2 threads,
/// tokens/s, 4 alternating runs each) 8 x 2 ran 1149-1242, 2 x 8 1067-1126 and 4 x 4 1045-1081;
/// against the earlier 2 x 6 blocks without the tree, in another 4 alternating runs, 1225-1345
/// against 1205-1266. See BM_DecodeProduct in benchmarks/bench_kernels.cpp.
template <typename Scalar>
void few_rows_product(const Matrix<Scalar>& x, const Matrix<Scalar>& weight,
                      Eigen::Ref<Matrix<Scalar>> y, Index begin, Index end) {
  const Index m = x.rows(), k = x.cols(), ys = y.outerStride();
  const Scalar* xd = x.data();
  Scalar* yd = y.data();
  const auto row = [&](Index j) { return weight.data() + j * k; };
  if (m == 1) {
    for (Index j = begin; j < end; ++j)
      dot_block<1, 1, Scalar>(xd, k, row(j), nullptr, k, yd + j, ys);
    return;
  }
  constexpr int MR = 8, NR = 2;
  constexpr Index kAhead = 2 * NR;
  Index j = begin;
  for (; j + NR <= end; j += NR) {
    const Scalar* ahead = j + kAhead + NR <= end ? row(j + kAhead) : nullptr;
    Index i = 0;
    for (; i + MR <= m; i += MR)  // the first group brings the block in
      dot_block<MR, NR, Scalar>(xd + i * k, k, row(j), i == 0 ? ahead : nullptr, k, yd + i * ys + j,
                                ys);
    for (; i + 2 <= m; i += 2)
      dot_block<2, NR, Scalar>(xd + i * k, k, row(j), i == 0 ? ahead : nullptr, k, yd + i * ys + j,
                               ys);
    for (; i < m; ++i)
      dot_block<1, NR, Scalar>(xd + i * k, k, row(j), i == 0 ? ahead : nullptr, k, yd + i * ys + j,
                               ys);
  }
  for (; j < end; ++j)
    for (Index i = 0; i < m; ++i)
      dot_block<1, 1, Scalar>(xd + i * k, k, row(j), nullptr, k, yd + i * ys + j, ys);
}

}  // namespace detail

namespace detail {

/// Columns [begin, end) of y = x Wᵀ on the calling thread.
template <typename Scalar>
void product_slice(const Matrix<Scalar>& x, const Matrix<Scalar>& weight,
                   Eigen::Ref<Matrix<Scalar>> y, Index begin, Index end) {
  if (x.rows() <= 16 && Eigen::internal::packet_traits<Scalar>::Vectorizable) {
    few_rows_product(x, weight, y, begin, end);
  } else {
    // Inside a parallel region Eigen runs the GEMM on the calling thread alone.
    y.middleCols(begin, end - begin).noalias() =
        x * weight.middleRows(begin, end - begin).transpose();
  }
}

/// Thread t's share of a product with n output columns: [edge(t), edge(t + 1)). Edges fall on
/// multiples of 16 columns (whole SIMD packets of y for the GEMM); below 256 columns thread 0
/// takes everything, since a share would be smaller than the cost of splitting.
inline Index slice_edge(Index n, Index threads, Index t) {
  if (n < 256) return t == 0 ? 0 : n;
  return t == threads ? n : (n * t / threads) / 16 * 16;
}

/// y_i = x W_iᵀ for i < count (weight_of(i) is W_i, output_of(i) is y_i, already shaped): each
/// thread computes its slice of every product in turn, in one parallel region, so the threads
/// meet once whatever the count (a decode step spent 18 % of its time with one thread waiting
/// for the other at the end of a product when each product had its own region).
template <typename Scalar, typename WeightOf, typename OutputOf>
void sliced_products(const Matrix<Scalar>& x, size_t count, WeightOf weight_of,
                     OutputOf output_of) {
  const auto run = [&](Index t, Index threads) {
    for (size_t i = 0; i < count; ++i) {
      const Matrix<Scalar>& w = weight_of(i);
      const Index n = w.rows();
      const Index begin = slice_edge(n, threads, t), end = slice_edge(n, threads, t + 1);
      if (end > begin) product_slice<Scalar>(x, w, output_of(i), begin, end);
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

/// y = x Wᵀ for a PyTorch-layout weight W [out, in].
///
/// With several threads, each thread computes its own slice of W's rows (y's columns), so W is
/// read once in all and no thread waits on another inside the product. Many rows (prompts): each
/// slice is one single-threaded Eigen GEMM; Eigen's own 2-thread GEMM, which splits x instead,
/// measured slower than 1 thread on the prompt's logits shape (256x512 by 32000: 69 against 106
/// GFLOP/s) where two slices reach 199. Few rows (decoding): the product is bound by reading W,
/// which a GEMM would also copy (pack) every step, so the slices go through the register-blocked
/// dot products of detail::few_rows_product.
/// This form writes into rows of a larger matrix (e.g. a segment's rows of all the logits);
/// y must already be [x.rows(), weight.rows()].
template <typename Scalar>
void linear(const Matrix<Scalar>& x, const Matrix<Scalar>& weight, Eigen::Ref<Matrix<Scalar>> y) {
  RETNET_REQUIRE(y.rows() == x.rows() && y.cols() == weight.rows(),
                 "linear: output block has the wrong shape");
  detail::sliced_products<Scalar>(
      x, 1, [&](size_t) -> const Matrix<Scalar>& { return weight; }, [&](size_t) { return y; });
}

/// y = x Wᵀ, resizing y (no allocation when it already has the shape).
template <typename Scalar>
void linear(const Matrix<Scalar>& x, const Matrix<Scalar>& weight, Matrix<Scalar>& y) {
  y.resize(x.rows(), weight.rows());
  linear(x, weight, Eigen::Ref<Matrix<Scalar>>(y));
}

/// y_i = x W_iᵀ for several weights that read the same x (q, k, v and g; fc1 and gate), each
/// y_i resized, in one parallel region (detail::sliced_products).
template <typename Scalar, size_t N>
void linear(const Matrix<Scalar>& x, const std::array<const Matrix<Scalar>*, N>& weights,
            const std::array<Matrix<Scalar>*, N>& ys) {
  for (size_t i = 0; i < N; ++i) ys[i]->resize(x.rows(), weights[i]->rows());
  detail::sliced_products<Scalar>(
      x, N, [&](size_t i) -> const Matrix<Scalar>& { return *weights[i]; },
      [&](size_t i) -> Matrix<Scalar>& { return *ys[i]; });
}

template <typename Scalar>
Scalar swish(Scalar x) {
  return x / (Scalar(1) + std::exp(-x));
}

/// Exact (erf) GELU, as torch.nn.functional.gelu.
template <typename Scalar>
Scalar gelu(Scalar x) {
  return Scalar(0.5) * x * (Scalar(1) + std::erf(x / std::sqrt(Scalar(2))));
}

template <typename Scalar>
void activate(Activation kind, Eigen::Ref<Matrix<Scalar>> x) {
  Scalar* p = x.data();
  const Index n = x.size();
  if (kind == Activation::kSwish) {
    for (Index i = 0; i < n; ++i) p[i] = swish(p[i]);
  } else {
    for (Index i = 0; i < n; ++i) p[i] = gelu(p[i]);
  }
}

/// Normalises `n` contiguous values in place, without weight:
///   RMSNorm:   x / sqrt(mean(x²) + eps)
///   LayerNorm: (x - mean(x)) / sqrt(var(x) + eps)
template <typename Scalar>
void normalize(NormKind kind, Scalar eps, Scalar* x, Index n) {
  Eigen::Map<Vector<Scalar>> v(x, n);
  if (kind == NormKind::kLayerNorm) v.array() -= v.mean();
  v *= Scalar(1) / std::sqrt(v.squaredNorm() / Scalar(n) + eps);
}

/// A decoder norm with its learned weight (and bias, for LayerNorm).
template <typename Scalar>
struct Norm {
  NormKind kind = NormKind::kRMSNorm;
  Vector<Scalar> weight;
  Vector<Scalar> bias;  // LayerNorm only

  /// y = norm(x) ⊙ weight (+ bias), row by row.
  void apply(const Matrix<Scalar>& x, Scalar eps, Matrix<Scalar>& y) const {
    y = x;
    for (Index r = 0; r < y.rows(); ++r) {
      normalize(kind, eps, y.row(r).data(), y.cols());
      y.row(r).array() *= weight.transpose().array();
      if (kind == NormKind::kLayerNorm) y.row(r) += bias.transpose();
    }
  }
};

}  // namespace retnet
