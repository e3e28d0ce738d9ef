// The three retention kernels over sequence length T (one batch entry, the base config's heads:
// 2 heads, dk 256, dv 432). Reports tokens per second; the parallel form is O(T²).
// Also the decode product: one step's weight matrices of the base config (141.8 MB, more than
// any cache) times a few rows, through retnet::linear (W in panels) and through Eigen's lazy
// product of row-major W; and a prompt chunk's products (256 rows), through retnet::linear and
// Eigen's threaded GEMM.
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
  std::vector<retnet::Matrix<float>> matrices;      // row-major, for Eigen's products
  std::vector<retnet::LinearWeight<float>> panels;  // the same, as the library stores them
  double bytes = 0;
  DecodeWeights() {
    const Index d = 512, dv = 864, ffn = 864, vocab = 32000;
    const Index shapes[8][2] = {{d, d},  {d, d},   {dv, d},  {dv, d},
                                {d, dv}, {ffn, d}, {ffn, d}, {d, ffn}};
    for (int layer = 0; layer < 6; ++layer)
      for (const auto& s : shapes) matrices.push_back(retnet::Matrix<float>::Random(s[0], s[1]));
    matrices.push_back(retnet::Matrix<float>::Random(vocab, d));
    for (const auto& m : matrices) {
      panels.emplace_back(m);
      bytes += double(m.size()) * sizeof(float);
    }
  }
};

// range(0): rows of x (the decoding batch); range(1): 0 = retnet::linear (W in panels), 1 =
// Eigen's coefficient-wise product of row-major W in blocks of 8 rows (what linear did before it
// had a kernel of its own).
void BM_DecodeProduct(benchmark::State& state) {
  static const DecodeWeights weights;
  const Index rows = state.range(0);
  const retnet::Matrix<float> x512 = retnet::Matrix<float>::Random(rows, 512);
  const retnet::Matrix<float> x864 = retnet::Matrix<float>::Random(rows, 864);
  retnet::Matrix<float> y;
  for (auto _ : state) {
    for (size_t i = 0; i < weights.matrices.size(); ++i) {
      const auto& w = weights.matrices[i];
      const auto& x = w.cols() == 512 ? x512 : x864;
      if (state.range(1) == 0) {
        retnet::linear(x, weights.panels[i], y);
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

// A prompt chunk's products: 256 rows through the output projection (32000 x 512) and one
// layer's matrices of the base config. range(0): threads; range(1): 0 = retnet::linear (W in
// panels, each thread multiplying its share of them), 1 = Eigen's own threaded GEMM of row-major W.
void BM_PromptProduct(benchmark::State& state) {
  const Index rows = 256, d = 512, dv = 864, ffn = 864;
  std::vector<retnet::Matrix<float>> matrices;
  std::vector<retnet::LinearWeight<float>> panels;
  for (const auto& s : {std::pair<Index, Index>{32000, d}, {d, d}, {dv, d}, {d, dv}, {ffn, d}}) {
    matrices.push_back(retnet::Matrix<float>::Random(s.first, s.second));
    panels.emplace_back(matrices.back());
  }
  const retnet::Matrix<float> x512 = retnet::Matrix<float>::Random(rows, 512);
  const retnet::Matrix<float> x864 = retnet::Matrix<float>::Random(rows, 864);
  retnet::Matrix<float> y;
  const int before = retnet::num_threads();
  retnet::set_num_threads(static_cast<int>(state.range(0)));
  double flops = 0;
  for (const auto& w : matrices) flops += 2.0 * rows * double(w.size());
  for (auto _ : state) {
    for (size_t i = 0; i < matrices.size(); ++i) {
      const auto& w = matrices[i];
      const auto& x = w.cols() == 512 ? x512 : x864;
      if (state.range(1) == 0) {
        retnet::linear(x, panels[i], y);
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
