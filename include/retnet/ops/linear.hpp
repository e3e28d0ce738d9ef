// Linear maps y = x Wᵀ (PyTorch's layout, W [out, in]) for every projection of the model, with W
// stored in panels so that one kernel serves a decode step (1-16 rows of x, bound by reading W)
// and a prompt (thousands of rows, bound by multiply-adds).
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"
#include "retnet/ops/weight_types.hpp"

namespace retnet {

/// W [rows, cols] stored as panels of kPanelRows consecutive rows, each panel transposed:
///   panel p is [cols][kPanelRows], its element (q, r) = W[kPanelRows·p + r, q],
/// with the last panel padded by zero rows. A product reads a panel front to back (one sequential
/// stream per thread, which the hardware prefetcher follows) and turns each input value x[i, q]
/// into 48 multiply-adds against one panel row: the 48 outputs stay in SIMD registers, with no
/// horizontal sums, where PyTorch's row-major layout needs a sum across SIMD lanes per output
/// (benchmarks/bench_kernels.cpp compares the two: BM_DecodeProduct).
///
/// The values are of one WeightType (ops/weight_types.hpp): Scalar itself (kF32), bf16 panels
/// that the products decode as they read them, or q8/q4 panels of int8 codes that the products
/// multiply by x rounded to int8 (Int8Rows), block of 32 by block.
template <typename Scalar>
class LinearWeight {
 public:
  static constexpr Index kPanelRows = detail::PanelFormat::kWidth;

  LinearWeight() = default;
  LinearWeight(Index rows, Index cols, WeightType type = WeightType::kF32) {
    resize(rows, cols, type);
  }
  explicit LinearWeight(const Matrix<Scalar>& w, WeightType type = WeightType::kF32) {
    assign(w.rows(), w.cols(), type, [&](Index first, Index n, Scalar* out) {
      MatrixMap<Scalar>(out, n, w.cols()) = w.middleRows(first, n);
    });
  }

  /// Bytes that a [rows, cols] weight of `type` holds (in double: hostile shapes cannot overflow).
  static double bytes_for(Index rows, Index cols, WeightType type) {
    return double((rows + kPanelRows - 1) / kPanelRows) *
           double(detail::PanelFormat::panel_bytes(type, cols, sizeof(Scalar)));
  }

  /// Shape [rows, cols] of `type`, all zero.
  void resize(Index rows, Index cols, WeightType type = WeightType::kF32) {
    RETNET_REQUIRE(rows >= 0 && cols >= 0, "LinearWeight: negative shape");
    RETNET_REQUIRE((type == WeightType::kF32 || std::is_same_v<Scalar, float>),
                   "LinearWeight: bf16, q8 and q4 weights are for float models");
    type_ = type, rows_ = rows, cols_ = cols;
    panel_bytes_ = detail::PanelFormat::panel_bytes(type, cols, sizeof(Scalar));
    bytes_.assign(static_cast<size_t>(panels() * panel_bytes_), 0);
  }

  /// Shape [rows, cols] of `type` with the values fill(first, n, p) writes to p for rows [first,
  /// first + n), row-major: a panel's rows at a time, so that no full-precision copy of W is
  /// ever held (a checkpoint reader converts each block of rows as it goes).
  template <typename FillRows>
  void assign(Index rows, Index cols, WeightType type, FillRows&& fill) {
    resize(rows, cols, type);
    Matrix<Scalar> panel_rows(kPanelRows, cols);  // zero past the last row of W
    StoredRows codes;
    for (Index p = 0; p < panels(); ++p) {
      const Index first = p * kPanelRows, n = std::min(kPanelRows, rows - first);
      panel_rows.setZero();
      fill(first, n, panel_rows.data());
      uint8_t* panel = bytes_.data() + p * panel_bytes_;
      if (type == WeightType::kF32) {
        MatrixMap<Scalar>(reinterpret_cast<Scalar*>(panel), cols, kPanelRows) =
            panel_rows.transpose();
      } else if (type == WeightType::kBF16) {
        auto* out = reinterpret_cast<uint16_t*>(panel);
        for (Index q = 0; q < cols; ++q)
          for (Index r = 0; r < kPanelRows; ++r)
            out[q * kPanelRows + r] = float_to_bf16(static_cast<float>(panel_rows(r, q)));
      } else if constexpr (std::is_same_v<Scalar, float>) {  // q8/q4 (float models only)
        quantize_rows(type, panel_rows.data(), n, cols, codes);
        detail::pack_panel(codes, panel);
      }
    }
  }

  /// Shape [rows, cols] of a q8/q4 `type` from stored codes: read(first, n, rows) fills `rows`
  /// (already resized to n rows) with rows [first, first + n), a panel at a time.
  template <typename ReadRows>
  void assign_stored(Index rows, Index cols, WeightType type, ReadRows&& read) {
    RETNET_REQUIRE(is_block_quantised(type), "LinearWeight: stored codes are q8 or q4");
    resize(rows, cols, type);
    StoredRows codes;
    for (Index p = 0; p < panels(); ++p) {
      const Index first = p * kPanelRows, n = std::min(kPanelRows, rows - first);
      codes.resize(type, n, cols);
      read(first, n, codes);
      detail::pack_panel(codes, bytes_.data() + p * panel_bytes_);
    }
  }

  /// Rows [first, first + n) of a q8/q4 weight in their stored form (for writing a checkpoint).
  StoredRows stored_rows(Index first, Index n) const {
    RETNET_REQUIRE(is_block_quantised(type_), "LinearWeight: stored codes are q8 or q4");
    RETNET_REQUIRE(first >= 0 && n >= 0 && first + n <= rows_, "LinearWeight: rows out of range");
    StoredRows out, part;
    out.resize(type_, n, cols_);
    const Index row_bytes = code_bytes(type_, cols_), blocks = quant_blocks(cols_);
    for (Index r = first; r < first + n;) {
      const Index in_panel = std::min(first + n, (r / kPanelRows + 1) * kPanelRows) - r;
      part.resize(type_, in_panel, cols_);
      detail::unpack_panel_codes(bytes_.data() + r / kPanelRows * panel_bytes_, r % kPanelRows,
                                 part);
      std::copy(part.codes.begin(), part.codes.end(), out.codes.begin() + (r - first) * row_bytes);
      std::copy(part.scales.begin(), part.scales.end(), out.scales.begin() + (r - first) * blocks);
      r += in_panel;
    }
    return out;
  }

  WeightType type() const { return type_; }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index size() const { return rows_ * cols_; }
  Index panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  /// Bytes of W's rows as held (codes and scales for q8/q4): what a product reads, without the
  /// zero rows that pad the last panel.
  size_t stored_bytes() const { return static_cast<size_t>(rows_ * (panel_bytes_ / kPanelRows)); }

  /// Panel p as stored (bf16 values, or q8/q4 blocks of codes and scales: ops/weight_types.hpp).
  const uint8_t* packed_panel(Index p) const { return bytes_.data() + p * panel_bytes_; }

  /// Panel p's rows [q0, q0 + depth) as Scalars, [depth][kPanelRows], of an f32 or bf16 weight:
  /// the panel itself for kF32, else decoded into `scratch` (room for depth·kPanelRows values).
  const Scalar* tile(Index p, Index q0, Index depth, Scalar* scratch) const {
    const uint8_t* panel = bytes_.data() + p * panel_bytes_;
    if (type_ == WeightType::kF32) return reinterpret_cast<const Scalar*>(panel) + q0 * kPanelRows;
    RETNET_REQUIRE(type_ == WeightType::kBF16, "LinearWeight::tile: f32 or bf16 weights only");
    if constexpr (std::is_same_v<Scalar, float>)
      detail::unpack_bf16_tile(panel, q0, depth, scratch);
    return scratch;
  }

  /// out[q] = W[r, q] for q < cols (a row of an embedding).
  void copy_row(Index r, Scalar* out) const {
    RETNET_REQUIRE(r >= 0 && r < rows_, "LinearWeight: row out of range");
    for (Index q = 0; q < cols_; ++q) out[q] = value(r, q);
  }

  /// W[r, q].
  Scalar at(Index r, Index q) const {
    RETNET_REQUIRE(r >= 0 && r < rows_ && q >= 0 && q < cols_, "LinearWeight: out of range");
    return value(r, q);
  }

  Matrix<Scalar> to_matrix() const {
    Matrix<Scalar> w(rows_, cols_);
    std::vector<Scalar> row(static_cast<size_t>(cols_));
    for (Index r = 0; r < rows_; ++r) {
      copy_row(r, row.data());
      w.row(r) = Eigen::Map<const RowVector<Scalar>>(row.data(), cols_);
    }
    return w;
  }

 private:
  Scalar value(Index r, Index q) const {
    using Format = detail::PanelFormat;
    const uint8_t* panel = bytes_.data() + r / kPanelRows * panel_bytes_;
    const Index pr = r % kPanelRows;
    switch (type_) {
      case WeightType::kF32:
        return reinterpret_cast<const Scalar*>(panel)[q * kPanelRows + pr];
      case WeightType::kBF16:
        return bf16_to_float(reinterpret_cast<const uint16_t*>(panel)[q * kPanelRows + pr]);
      default: {
        const uint8_t* block = panel + q / kQuantBlock * Format::block_bytes(type_);
        const int code = Format::code(type_, block, pr, q % kQuantBlock) - Format::offset(type_);
        return half_to_float(Format::scales(type_, block)[pr]) * Scalar(code);  // exact
      }
    }
  }

  WeightType type_ = WeightType::kF32;
  Index rows_ = 0, cols_ = 0, panel_bytes_ = 0;
  std::vector<uint8_t, Eigen::aligned_allocator<uint8_t>> bytes_;
};

namespace detail {

template <typename Scalar>
void check_input(const Matrix<Scalar>& x, const LinearWeight<Scalar>& w) {
  RETNET_REQUIRE(x.cols() == w.cols(), "linear: x has " + std::to_string(x.cols()) +
                                           " columns, the weight " + std::to_string(w.cols()));
}

/// f(std::integral_constant<int, R>(), i) for blocks of rows [i, i + R) that cover [first, m):
/// blocks of MR rows, then the remainder by halves of MR.
template <int MR, typename F>
void for_row_blocks(Index first, Index m, F&& f) {
  Index i = first;
  for (; i + MR <= m; i += MR) f(std::integral_constant<int, MR>(), i);
  if constexpr (MR > 1) {
    if (i < m) for_row_blocks<MR / 2>(i, m, f);
  }
}

/// The SIMD registers of the target (32 with AVX-512, 16 with AVX2).
constexpr int kRegisters = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;

/// The largest power of two <= n (n >= 1).
constexpr int floor_power_of_two(int n) {
  return n < 2 ? 1 : 2 * floor_power_of_two(n / 2);
}

template <typename Scalar>
struct PanelKernel {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr Index kLanes = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr Index kWidth = LinearWeight<Scalar>::kPanelRows;
  static_assert(kWidth % kLanes == 0, "a panel row must be whole SIMD packets");
  static constexpr int kPackets = static_cast<int>(kWidth / kLanes);
  /// A step of the loop below takes one panel row (kPackets packets) and MR values of x, one per
  /// row, each broadcast to a packet. The operands either come panel first (the kPackets panel
  /// packets held, x broadcast one row at a time) or x first (the MR broadcasts held, the panel
  /// loaded a packet at a time); the order that holds more rows in the registers is used:
  /// AVX-512 (32 registers, 3 packets) holds 9 rows panel first, 7 x first; AVX2 (16, 6) 1 panel
  /// first, 2 x first.
  static constexpr int kRowsPanelFirst = (kRegisters - kPackets - 1) / kPackets;
  static constexpr int kRowsXFirst = (kRegisters - 1) / (kPackets + 1);
  static constexpr bool kPanelFirst = kRowsPanelFirst >= kRowsXFirst;
  /// Rows of x per block: the most that fit, rounded down to a power of two, so that a batch of
  /// 8 and a prompt's 256-row block split into whole blocks (8 with AVX-512, 2 with AVX2).
  static constexpr int kRows = floor_power_of_two(std::max({1, kRowsPanelFirst, kRowsXFirst}));

  /// y[i, c] (+)= Σ_{q < k} x[i, q] · panel[q, c] for i < MR, c < cols (<= kWidth): each step
  /// multiplies one panel row by MR broadcast values of x. Every row is one chain of
  /// multiply-adds in q order, whatever MR is, so a row's result never depends on the other rows
  /// of x (a server's batch relies on it). Three chains per row (one per packet) keep enough
  /// multiply-adds in flight at MR = 1, where reading W, not the adds, sets the pace.
  template <int MR, typename Rows>
  static void block(const Scalar* x, Index xs, const Rows& panel, Index k, Scalar* y, Index ys,
                    Index cols, bool accumulate) {
    namespace ei = Eigen::internal;
    Packet acc[MR][kPackets];
    for (auto& row : acc)
      for (auto& a : row) a = ei::pset1<Packet>(Scalar(0));
    for (Index q = 0; q < k; ++q) {
      panel.template prefetch<MR>(q);
      if constexpr (kPanelFirst) {
        Packet w[kPackets];
        for (int j = 0; j < kPackets; ++j) w[j] = panel.row(q, j);
        for (int i = 0; i < MR; ++i) {
          const Packet xb = ei::pset1<Packet>(x[i * xs + q]);
          for (int j = 0; j < kPackets; ++j) acc[i][j] = ei::pmadd(xb, w[j], acc[i][j]);
        }
      } else {
        Packet xb[MR];
        for (int i = 0; i < MR; ++i) xb[i] = ei::pset1<Packet>(x[i * xs + q]);
        for (int j = 0; j < kPackets; ++j) {
          const Packet w = panel.row(q, j);
          for (int i = 0; i < MR; ++i) acc[i][j] = ei::pmadd(xb[i], w, acc[i][j]);
        }
      }
    }
    for (int i = 0; i < MR; ++i) {
      Scalar* yi = y + i * ys;
      if (cols == kWidth) {
        for (int j = 0; j < kPackets; ++j) {
          Packet v = acc[i][j];
          if (accumulate) v = ei::padd(v, ei::ploadu<Packet>(yi + j * kLanes));
          ei::pstoreu(yi + j * kLanes, v);
        }
      } else {  // the zero-padded last panel: keep the valid columns
        Scalar out[kWidth];
        for (int j = 0; j < kPackets; ++j) ei::pstoreu(out + j * kLanes, acc[i][j]);
        for (Index c = 0; c < cols; ++c) yi[c] = accumulate ? yi[c] + out[c] : out[c];
      }
    }
  }

  /// Panel rows of Scalars as stored ([k][kWidth]): an f32 panel, or a decoded tile. Streamed
  /// rows are read once, from memory (decoding), and ask for their bytes ahead; the others are
  /// read again and again from cache (a prompt's blocks of rows, a decoded tile).
  template <bool kStreamed>
  struct ScalarRows {
    const Scalar* rows;
    Packet row(Index q, Index j) const {
      return Eigen::internal::ploadu<Packet>(rows + q * kWidth + j * kLanes);
    }
    template <int kRows>
    void prefetch(Index q) const {
      if constexpr (kStreamed) prefetch_ahead<kRows>(rows + q * kWidth, kWidth * sizeof(Scalar));
    }
  };
};

/// The q8/q4 products, y[i, c] = Σ_b (s_w[c, b] · s_x[i, b]) · Σ_{q in block b} n_w[c, q] ·
/// n_x[i, q], with n_x, s_x the rounded rows of x (Int8Rows). A block's integer sum is exact
/// (|Σ| <= 32 · 127² < 2²⁴, so exact in float too), and each row's sum over blocks is one chain
/// y = fma(block sum, s_w · s_x, y) in block order, whatever the number of rows: the two kernels
/// below compute it bit for bit alike.
struct Int8Product {
  static constexpr Index kWidth = detail::PanelFormat::kWidth;

  /// Rows [i0, i1) of x against blocks [b0, b1) of a panel, into y (row i at y + (i - i0) · ys,
  /// `cols` <= 48 valid columns; read first when b0 > 0).
  static void run(const Int8Rows& x, Index i0, Index i1, WeightType type, const uint8_t* panel,
                  Index b0, Index b1, float* y, Index ys, Index cols, bool integer_dots) {
#ifdef RETNET_INT8_DOTS
    if (integer_dots) {
      const auto rows = [&](auto kernel) {
        using Kernel = decltype(kernel);
        for_row_blocks<Kernel::kRows>(i0, i1, [&](auto mr, Index i) {
          Kernel::template block<decltype(mr)::value>(x, i, panel, b0, b1, y + (i - i0) * ys, ys,
                                                      cols);
        });
      };
      if (type == WeightType::kQ8) return rows(IntegerKernel<WeightType::kQ8>());
      return rows(IntegerKernel<WeightType::kQ4>());
    }
#endif
    (void)integer_dots;
    portable(x, i0, i1, type, panel, b0, b1, y, ys, cols);
  }

#ifdef RETNET_INT8_DOTS
  /// With Int8Dots: a 32-bit lane of a panel's code vector holds 4 columns of one row, so each
  /// dot product adds 4 products for kLanes rows of W against 4 broadcast codes of x (one
  /// instruction with VNNI; with AVX2 alone vpmaddubsw, vpmaddwd and an add, and for q8 the
  /// signs).
  template <WeightType kType>
  struct IntegerKernel {
    using Ops = detail::Int8Dots;
    using Ints = Ops::Ints;
    using Floats = Ops::Floats;
    static constexpr Index kLanes = Ops::kLanes;
    static constexpr int kPackets = static_cast<int>(kWidth / kLanes);
    /// Code vectors loaded at a time (all three with AVX-512; half a panel row with AVX2).
    static constexpr int kChunk = std::min(kPackets, 3);
    /// Rows of x per block: MR·kPackets accumulators, kChunk code vectors (two halves each for
    /// q4), two broadcasts and q4's nibble mask fit the registers: 7 with AVX-512, 1 with AVX2.
    static constexpr int kRows = std::max(1, (kRegisters - 2 * kChunk - 3) / kPackets);
    /// What the dot products add beyond Σ n_w · n_x, per unit of Σ n_x (Int8Dots).
    static constexpr int kOffset = kType == WeightType::kQ8 ? Ops::kQ8Offset : 8;

    template <int MR>
    static void block(const Int8Rows& x, Index i0, const uint8_t* panel, Index b0, Index b1,
                      float* y, Index ys, Index cols) {
      namespace ei = Eigen::internal;
      using Format = detail::PanelFormat;
      alignas(64) float out[MR][kWidth];
      for (int i = 0; i < MR; ++i)
        for (Index c = 0; c < kWidth; ++c) out[i][c] = b0 > 0 && c < cols ? y[i * ys + c] : 0.f;
      for (Index b = b0; b < b1; ++b) {
        const uint8_t* codes = panel + b * Format::block_bytes(kType);
        const int8_t* xb = x.codes.data() + i0 * x.stride + b * kQuantBlock;
        const auto x4 = [&](int i, Index q) {  // codes q..q+3 of row i, in every lane
          int32_t v;
          std::memcpy(&v, xb + i * x.stride + q, 4);
          return Ops::set1(v);
        };
        Ints acc[MR][kPackets];
        for (auto& row : acc)
          for (auto& a : row) a = Ops::zero();
        if constexpr (kType == WeightType::kQ8) {
          for (Index g = 0; g < kQuantBlock / 4; ++g) {
            detail::prefetch_ahead<MR>(codes + g * kWidth * 4, kWidth * 4);
            for (int j0 = 0; j0 < kPackets; j0 += kChunk) {
              Ints w[kChunk];
              for (int j = 0; j < kChunk; ++j)
                w[j] = Ops::load(codes + (g * kWidth + (j0 + j) * kLanes) * 4);
              for (int i = 0; i < MR; ++i) {
                const Ints xi = x4(i, 4 * g);
                for (int j = 0; j < kChunk; ++j)
                  acc[i][j0 + j] = Ops::dot_q8(acc[i][j0 + j], w[j], xi);
              }
            }
          }
        } else {  // a byte holds column q (low four bits) and q + 16 (high four)
          for (Index g = 0; g < kQuantBlock / 8; ++g) {
            detail::prefetch_ahead<MR>(codes + g * kWidth * 4, kWidth * 4);
            for (int j0 = 0; j0 < kPackets; j0 += kChunk) {
              Ints low[kChunk], high[kChunk];
              for (int j = 0; j < kChunk; ++j) {
                const Ints w = Ops::load(codes + (g * kWidth + (j0 + j) * kLanes) * 4);
                low[j] = Ops::low_nibbles(w), high[j] = Ops::high_nibbles(w);
              }
              for (int i = 0; i < MR; ++i) {
                const Ints xl = x4(i, 4 * g), xh = x4(i, 16 + 4 * g);
                for (int j = 0; j < kChunk; ++j) {
                  acc[i][j0 + j] = Ops::dot(acc[i][j0 + j], low[j], xl);
                  acc[i][j0 + j] = Ops::dot(acc[i][j0 + j], high[j], xh);
                }
              }
            }
          }
        }
        // Σ n_w · n_x = (the dot products) - offset · Σ n_x, then scaled into the row's chain.
        const uint16_t* scales = Format::scales(kType, codes);
        Floats s[kPackets];
        for (int j = 0; j < kPackets; ++j) s[j] = Ops::halves(scales + j * kLanes);
        for (int i = 0; i < MR; ++i) {
          const Index at = (i0 + i) * x.blocks + b;
          const Ints correction = Ops::set1(kOffset * x.sums[at]);
          const Floats sx = ei::pset1<Floats>(x.scales[at]);
          for (int j = 0; j < kPackets; ++j) {
            float* o = out[i] + j * kLanes;
            const Floats sum = Ops::to_float(Ops::sub(acc[i][j], correction));
            ei::pstore(o, ei::pmadd(sum, ei::pmul(s[j], sx), ei::pload<Floats>(o)));
          }
        }
      }
      for (int i = 0; i < MR; ++i)
        for (Index c = 0; c < cols; ++c) y[i * ys + c] = out[i][c];
    }
  };
#endif

  /// Without Int8Dots: each block's codes decoded to floats once ([32][48]), the float panel
  /// kernel's exact block sums, then the same chain.
  static void portable(const Int8Rows& x, Index i0, Index i1, WeightType type, const uint8_t* panel,
                       Index b0, Index b1, float* y, Index ys, Index cols) {
    namespace ei = Eigen::internal;
    using Format = detail::PanelFormat;
    using Kernel = PanelKernel<float>;
    using Packet = Kernel::Packet;
    constexpr Index kLanes = Kernel::kLanes;
    alignas(64) float tile[kQuantBlock * kWidth], scales[kWidth];
    for (Index b = b0; b < b1; ++b) {
      const uint8_t* block = panel + b * Format::block_bytes(type);
      detail::unpack_block_codes(type, block, tile);
      halves_to_floats(Format::scales(type, block), scales, kWidth);
      for_row_blocks<Kernel::kRows>(i0, i1, [&](auto mr, Index i) {
        constexpr int MR = decltype(mr)::value;
        alignas(64) float sums[MR][kWidth], out[MR][kWidth];
        Kernel::block<MR>(x.values.data() + i * x.stride + b * kQuantBlock, x.stride,
                          Kernel::ScalarRows<false>{tile}, kQuantBlock, &sums[0][0], kWidth, kWidth,
                          false);
        for (int r = 0; r < MR; ++r) {
          float* yr = y + (i - i0 + r) * ys;
          for (Index c = 0; c < kWidth; ++c) out[r][c] = b > 0 && c < cols ? yr[c] : 0.f;
          const Packet sx = ei::pset1<Packet>(x.scales[(i + r) * x.blocks + b]);
          for (Index c = 0; c < kWidth; c += kLanes)
            ei::pstore(out[r] + c, ei::pmadd(ei::pload<Packet>(sums[r] + c),
                                             ei::pmul(ei::pload<Packet>(scales + c), sx),
                                             ei::pload<Packet>(out[r] + c)));
          for (Index c = 0; c < cols; ++c) yr[c] = out[r][c];
        }
      });
    }
  }
};

/// Columns [kWidth·first_panel, kWidth·end_panel) of y = x Wᵀ on the calling thread; `rounded`
/// is x rounded for a q8/q4 W (Int8Rows), else unused.
///
/// Sums run kDepth values of q at a time, each depth slice's sum added to y: the panel's
/// [kDepth][48] slice (24 KiB for float) stays in L1 while a block of kRowBlock rows of x passes
/// it. Few rows (decoding) take each panel's slices in turn, so W is read front to back once;
/// many rows (prompts) take, per block of rows, each panel's slices in turn too, so that the
/// block's [kRowBlock][48] outputs (48 KiB) stay in cache while they accumulate (a 256 x 32000
/// block of logits would not) and x's block (at most a few hundred KiB) stays in L2. Either way
/// a row's sum is the same chain, so y's rows do not depend on how many rows x has.
template <typename Scalar>
void panel_product(const Matrix<Scalar>& x, const Int8Rows& rounded, const LinearWeight<Scalar>& w,
                   Scalar* y, Index ys, Index first_panel, Index end_panel, bool integer_dots) {
  using Kernel = PanelKernel<Scalar>;
  constexpr Index kWidth = Kernel::kWidth, kDepth = 128, kRowBlock = 256;
  const Index m = x.rows(), k = x.cols(), n = w.rows();
  alignas(64) Scalar scratch[kDepth * kWidth];  // a decoded tile of a bf16 panel
  const bool few_rows = m <= 2 * Kernel::kRows;
  const auto slice = [&](Index p, Index q0, Index i0, Index rows) {
    const Index c0 = p * kWidth, depth = std::min(kDepth, k - q0), cols = std::min(kWidth, n - c0);
    Scalar* yp = y + i0 * ys + c0;
    if constexpr (std::is_same_v<Scalar, float>) {
      if (is_block_quantised(w.type()))
        return Int8Product::run(rounded, i0, i0 + rows, w.type(), w.packed_panel(p),
                                q0 / kQuantBlock, quant_blocks(q0 + depth), yp, ys, cols,
                                integer_dots);
    }
    const auto multiply = [&](const auto& panel_rows) {
      for_row_blocks<Kernel::kRows>(0, rows, [&](auto mr, Index i) {
        Kernel::template block<decltype(mr)::value>(x.data() + (i0 + i) * k + q0, k, panel_rows,
                                                    depth, yp + i * ys, ys, cols, q0 > 0);
      });
    };
    // One row of x reads a bf16 panel decoding each row in registers, in one pass with the loads
    // from memory; more rows decode a tile once for all their blocks (with the decoding in the
    // loop, GCC 12 keeps a block's accumulators on the stack). Both decode the same values, so
    // the results agree bit for bit.
    if constexpr (std::is_same_v<Scalar, float>) {
      if (m == 1 && w.type() == WeightType::kBF16)
        return multiply(detail::Bf16Rows{w.packed_panel(p), q0});
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
void sliced_products(const Matrix<Scalar>& x, size_t count, WeightOf weight_of, OutputOf output_of,
                     bool integer_dots = kHasInt8Dots) {
  // A q8/q4 product's x rounded once for all its threads, in storage the calling thread keeps
  // (so that decoding allocates nothing once it has seen its largest x).
  thread_local Int8Rows storage;
  Int8Rows& rounded = storage;  // the lambda below must see this thread's, not a worker's
  if constexpr (std::is_same_v<Scalar, float>) {
    bool quantised = false;
    for (size_t i = 0; i < count; ++i) quantised |= is_block_quantised(weight_of(i).type());
    if (quantised) rounded.assign(x.data(), x.rows(), x.cols(), !integer_dots);
  }
  const auto run = [&](Index t, Index threads) {
    for (size_t i = 0; i < count; ++i) {
      const LinearWeight<Scalar>& w = weight_of(i);
      auto&& y = output_of(i);
      const Index begin = panel_edge(w, threads, t), end = panel_edge(w, threads, t + 1);
      if (end > begin)
        panel_product<Scalar>(x, rounded, w, y.data(), y.outerStride(), begin, end, integer_dots);
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
