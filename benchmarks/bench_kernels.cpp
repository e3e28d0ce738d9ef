// The three retention kernels over sequence length T (one batch entry, the base config's heads:
// 2 heads, dk 256, dv 432). Reports tokens per second; the parallel form is O(T²).
// Also the decode product: one step's weight matrices of the base config (141.8 MB, more than
// any cache) times a few rows, through retnet::linear and through Eigen's lazy product (and, at
// 8 rows, with W stored in panels: a layout the library does not use yet); and a
// prompt chunk's products (256 rows), through retnet::linear and Eigen's threaded GEMM.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <retnet/retnet.hpp>
#include <utility>
#include <vector>

namespace {

using retnet::Index;
using retnet::Tensor4;

struct Inputs {
  Tensor4<float> q, k, v;
  std::vector<float> decays;
  explicit Inputs(Index time, Index heads = 2, Index dk = 256, Index dv = 432)
      : q(1, heads, time, dk),
        k(1, heads, time, dk),
        v(1, heads, time, dv),
        decays(retnet::default_decays<float>(heads)) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.f, 0.1f);
    for (auto* t : {&q, &k, &v})
      for (Index i = 0; i < t->size(); ++i) t->data()[i] = normal(rng);
  }
};

void BM_ParallelRetention(benchmark::State& state) {
  const Inputs in(state.range(0));
  Tensor4<float> out;
  for (auto _ : state) {
    retnet::parallel_retention(in.q, in.k, in.v, in.decays,
                               static_cast<retnet::RetentionState<float>*>(nullptr), out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_ChunkwiseRetention(benchmark::State& state) {
  const Inputs in(state.range(0));
  Tensor4<float> out;
  for (auto _ : state) {
    retnet::RetentionState<float> s;
    retnet::chunkwise_retention(in.q, in.k, in.v, in.decays, state.range(1), &s, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_RecurrentRetention(benchmark::State& state) {
  const Inputs in(state.range(0));
  Tensor4<float> out;
  for (auto _ : state) {
    retnet::RetentionState<float> s;
    retnet::recurrent_retention(in.q, in.k, in.v, in.decays, &s, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// The matrices one decoding step multiplies, in order: per layer q, k, v, g, out, fc1, gate, fc2,
// then the output projection (base config).
struct DecodeWeights {
  std::vector<retnet::Matrix<float>> matrices;
  double bytes = 0;
  DecodeWeights() {
    const Index d = 512, dv = 864, ffn = 864, vocab = 32000;
    const Index shapes[8][2] = {{d, d},  {d, d},   {dv, d},  {dv, d},
                                {d, dv}, {ffn, d}, {ffn, d}, {d, ffn}};
    for (int layer = 0; layer < 6; ++layer)
      for (const auto& s : shapes) matrices.push_back(retnet::Matrix<float>::Random(s[0], s[1]));
    matrices.push_back(retnet::Matrix<float>::Random(vocab, d));
    for (const auto& m : matrices) bytes += double(m.size()) * sizeof(float);
  }
};

// range(0): rows of x (the decoding batch); range(1): 0 = retnet::linear, 1 = Eigen's
// coefficient-wise product in blocks of 8 rows of W (what linear did before its own kernel).
void BM_DecodeProduct(benchmark::State& state) {
  static const DecodeWeights weights;
  const Index rows = state.range(0);
  const retnet::Matrix<float> x512 = retnet::Matrix<float>::Random(rows, 512);
  const retnet::Matrix<float> x864 = retnet::Matrix<float>::Random(rows, 864);
  retnet::Matrix<float> y;
  for (auto _ : state) {
    for (const auto& w : weights.matrices) {
      const auto& x = w.cols() == 512 ? x512 : x864;
      if (state.range(1) == 0) {
        retnet::linear(x, w, y);
      } else {
        y.resize(rows, w.rows());
        for (Index j = 0; j < w.rows(); j += 8) {
          const Index n = std::min<Index>(8, w.rows() - j);
          y.middleCols(j, n).noalias() = x.lazyProduct(w.middleRows(j, n).transpose());
        }
      }
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.SetLabel(state.range(1) == 0 ? "retnet::linear" : "eigen lazy product");
  state.counters["GB/s"] =
      benchmark::Counter(weights.bytes * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      weights.bytes / sizeof(float) * 2.0 * double(rows) * double(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

// The same matrices stored in panels of 3 SIMD packets of W's rows (48 rows with AVX-512),
// [panels][k][48], zero past the last row, and multiplied by 8 rows of x with broadcast values:
// one sequential stream of W per thread and no lane sums. Not used by the library: Eigen's GEMM
// cannot read panels, so prompts would need a GEMM of their own. Kept as the measurement behind
// "Why batch 8 stops at about 3.5 × here" in docs/PERFORMANCE.md; compare with
// BM_DecodeProduct/8/0 at the same OMP_NUM_THREADS.
struct PanelWeights {
  using Packet = Eigen::internal::packet_traits<float>::type;
  static constexpr Index kLanes = Eigen::internal::packet_traits<float>::size;
  static constexpr Index kWidth = 3 * kLanes;
  struct Panels {
    Index n = 0, k = 0, count = 0;
    std::vector<float, Eigen::aligned_allocator<float>> data;
  };
  std::vector<Panels> matrices;
  explicit PanelWeights(const DecodeWeights& weights) {
    for (const auto& m : weights.matrices) {
      Panels p;
      p.n = m.rows(), p.k = m.cols(), p.count = (p.n + kWidth - 1) / kWidth;
      p.data.assign(static_cast<size_t>(p.count * p.k * kWidth), 0.f);
      for (Index r = 0; r < p.n; ++r)
        for (Index c = 0; c < p.k; ++c)
          p.data[static_cast<size_t>(((r / kWidth) * p.k + c) * kWidth + r % kWidth)] = m(r, c);
      matrices.push_back(std::move(p));
    }
  }
  // y [8, n] = x W^T for panels [begin, end), with xt = x transposed, [k, 8].
  static void product(const Panels& w, const float* xt, float* y, Index begin, Index end) {
    namespace ei = Eigen::internal;
    for (Index panel = begin; panel < end; ++panel) {
      Packet acc[8][3];
      for (auto& row : acc)
        for (auto& a : row) a = ei::pset1<Packet>(0.f);
      const float* wp = w.data.data() + panel * w.k * kWidth;
      for (Index c = 0; c < w.k; ++c, wp += kWidth) {
        const Packet w0 = ei::pload<Packet>(wp), w1 = ei::pload<Packet>(wp + kLanes),
                     w2 = ei::pload<Packet>(wp + 2 * kLanes);
        for (int i = 0; i < 8; ++i) {
          const Packet xb = ei::pset1<Packet>(xt[c * 8 + i]);
          acc[i][0] = ei::pmadd(xb, w0, acc[i][0]);
          acc[i][1] = ei::pmadd(xb, w1, acc[i][1]);
          acc[i][2] = ei::pmadd(xb, w2, acc[i][2]);
        }
      }
      const Index first = panel * kWidth, cols = std::min(kWidth, w.n - first);
      alignas(64) float out[kWidth];
      for (int i = 0; i < 8; ++i) {
        for (int j = 0; j < 3; ++j) ei::pstore(out + j * kLanes, acc[i][j]);
        std::copy_n(out, cols, y + i * w.n + first);
      }
    }
  }
};

void BM_DecodeProductPanels(benchmark::State& state) {
  static const DecodeWeights weights;
  static const PanelWeights panels(weights);
  retnet::Matrix<float> xt512 = retnet::Matrix<float>::Random(512, 8);  // x transposed
  retnet::Matrix<float> xt864 = retnet::Matrix<float>::Random(864, 8);
  std::vector<float> y(8 * 32000);
  {  // the panels compute the same product as retnet::linear (output projection, 32000 x 512)
    const auto& w = panels.matrices.back();
    PanelWeights::product(w, xt512.data(), y.data(), 0, w.count);
    retnet::Matrix<float> expected;
    retnet::linear(retnet::Matrix<float>(xt512.transpose()), weights.matrices.back(), expected);
    const retnet::ConstMatrixMap<float> got(y.data(), 8, w.n);
    if (!got.isApprox(expected, 1e-5f)) state.SkipWithError("panel product differs from linear");
  }
  const Index threads = retnet::num_threads();
  for (auto _ : state) {
    for (const auto& w : panels.matrices) {
      const float* xt = w.k == 512 ? xt512.data() : xt864.data();
      retnet::parallel_for(threads, [&](Index t) {
        PanelWeights::product(w, xt, y.data(), w.count * t / threads, w.count * (t + 1) / threads);
      });
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.counters["GB/s"] =
      benchmark::Counter(weights.bytes * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(weights.bytes / sizeof(float) * 2.0 * 8 * double(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

// A prompt chunk's products: 256 rows through the output projection (32000 x 512) and one
// layer's matrices of the base config. range(0): threads; range(1): 0 = retnet::linear (a
// single-threaded GEMM per thread on its slice of W's rows), 1 = Eigen's own threaded GEMM.
void BM_PromptProduct(benchmark::State& state) {
  const Index rows = 256, d = 512, dv = 864, ffn = 864;
  std::vector<retnet::Matrix<float>> matrices;
  for (const auto& s : {std::pair<Index, Index>{32000, d}, {d, d}, {dv, d}, {d, dv}, {ffn, d}})
    matrices.push_back(retnet::Matrix<float>::Random(s.first, s.second));
  const retnet::Matrix<float> x512 = retnet::Matrix<float>::Random(rows, 512);
  const retnet::Matrix<float> x864 = retnet::Matrix<float>::Random(rows, 864);
  retnet::Matrix<float> y;
  const int before = retnet::num_threads();
  retnet::set_num_threads(static_cast<int>(state.range(0)));
  double flops = 0;
  for (const auto& w : matrices) flops += 2.0 * rows * double(w.size());
  for (auto _ : state) {
    for (const auto& w : matrices) {
      const auto& x = w.cols() == 512 ? x512 : x864;
      if (state.range(1) == 0) {
        retnet::linear(x, w, y);
      } else {
        y.resize(rows, w.rows());
        y.noalias() = x * w.transpose();
      }
      benchmark::DoNotOptimize(y.data());
    }
  }
  retnet::set_num_threads(before);
  state.SetLabel(state.range(1) == 0 ? "retnet::linear" : "eigen threaded gemm");
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_PromptProduct)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeProduct)->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeProductPanels)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParallelRetention)
    ->RangeMultiplier(2)
    ->Range(256, 8192)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ChunkwiseRetention)
    ->ArgsProduct({benchmark::CreateRange(256, 8192, 2), {64, 256}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RecurrentRetention)
    ->RangeMultiplier(2)
    ->Range(256, 8192)
    ->Unit(benchmark::kMillisecond);
