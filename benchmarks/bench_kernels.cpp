// The three retention kernels over sequence length T (one batch entry, the base config's heads:
// 2 heads, dk 256, dv 432). Reports tokens per second; the parallel form is O(T²).
// Also the decode product: one step's weight matrices of the base config (141.8 MB, more than
// any cache) times a few rows, through retnet::linear (W in panels) and through Eigen's lazy
// product of row-major W; and a prompt chunk's products (256 rows), through retnet::linear and
// Eigen's threaded GEMM.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

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

// One decoding step of the state alone, at fla-hub/retnet-1.3B's head shape (8 heads, dk 256,
// dv 512: 4 MB a layer and sequence), for range(0) sequences (1: in the last-level cache; 24: a
// whole 1.3B sequence's 100 MB), the state written every token (range(1) = 1, the plain
// recurrence) or once per range(1) tokens (the deferred fold). 2 threads. Reports the state's
// bytes over the time of a step ("state GB/s": the plain step moves twice that, the deferred
// (1 + 1/W) times), so the two compare directly.
void BM_StateStep(benchmark::State& state) {
  const Index batch = state.range(0), pairs = state.range(1), heads = 8, dk = 256, dv = 512;
  retnet::set_num_threads(2);
  Tensor4<float> q(batch, heads, 1, dk), k(batch, heads, 1, dk), v(batch, heads, 1, dv), out;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 0.1f);
  for (auto* t : {&q, &k, &v})
    for (Index i = 0; i < t->size(); ++i) t->data()[i] = normal(rng);
  const auto decays = retnet::default_decays<float>(heads);
  retnet::RetentionState<float> s(batch, heads, dk, dv);
  s.setZero();
  retnet::PendingPairs<float> pending;
  if (pairs > 1) pending = retnet::PendingPairs<float>(batch, heads, pairs, dk, dv, decays);
  for (auto _ : state) {
    if (pairs > 1)
      retnet::deferred_recurrent_retention(q, k, v, decays, s, pending, out);
    else
      retnet::recurrent_retention(q, k, v, decays, &s, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["state GB/s"] =
      benchmark::Counter(double(s.size()) * sizeof(float) * double(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
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

// A prompt's products: T rows through the output projection (32000 x 512) and one layer's
// matrices of the base config. range(0): threads; range(1): 0 = retnet::linear (W in f32 panels,
// each thread multiplying its share of them), 1 = Eigen's own threaded GEMM of row-major W,
// 2 = retnet::linear with bf16 panels, 3 = the same with bf16 dots (x rounded to bfloat16:
// vdpbf16ps where the CPU has AVX512-BF16); range(2): T.
void BM_PromptProduct(benchmark::State& state) {
  const Index rows = state.range(2), d = 512, dv = 864, ffn = 864;
  const int variant = static_cast<int>(state.range(1));
  std::vector<retnet::Matrix<float>> matrices;
  std::vector<retnet::LinearWeight<float>> panels;
  for (const auto& s : {std::pair<Index, Index>{32000, d}, {d, d}, {dv, d}, {d, dv}, {ffn, d}}) {
    matrices.push_back(retnet::Matrix<float>::Random(s.first, s.second));
    panels.emplace_back(matrices.back(),
                        variant >= 2 ? retnet::WeightType::kBF16 : retnet::WeightType::kF32);
    panels.back().set_bf16_dots(variant == 3);
  }
  const retnet::Matrix<float> x512 = retnet::Matrix<float>::Random(rows, 512);
  const retnet::Matrix<float> x864 = retnet::Matrix<float>::Random(rows, 864);
  // One output per matrix, written once before the timing and kept, as a model keeps its
  // activations: a T x 32000 block of logits would otherwise be timed faulting in its pages
  // (T = 2048: 262 MB; one iteration is all a repetition runs).
  std::vector<retnet::Matrix<float>> ys;
  for (const auto& w : matrices) ys.push_back(retnet::Matrix<float>::Zero(rows, w.rows()));
  const int before = retnet::num_threads();
  retnet::set_num_threads(static_cast<int>(state.range(0)));
  double flops = 0;
  for (const auto& w : matrices) flops += 2.0 * rows * double(w.size());
  for (auto _ : state) {
    for (size_t i = 0; i < matrices.size(); ++i) {
      const auto& w = matrices[i];
      const auto& x = w.cols() == 512 ? x512 : x864;
      if (variant != 1)
        retnet::linear(x, panels[i], ys[i]);
      else
        ys[i].noalias() = x * w.transpose();
      benchmark::DoNotOptimize(ys[i].data());
    }
  }
  retnet::set_num_threads(before);
  state.SetLabel(variant == 0   ? "retnet::linear f32"
                 : variant == 1 ? "eigen threaded gemm"
                 : variant == 2 ? "retnet::linear bf16"
                                : "retnet::linear bf16 dots");
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// The floors the products are measured against, in the same harness.
//
// BM_FmaPeak: what the multiply-add units can do: each thread runs 12 independent chains of
// packet multiply-adds (enough to cover the latency of two units) on registers. range(0): threads.
void BM_FmaPeak(benchmark::State& state) {
  namespace ei = Eigen::internal;
  using Packet = ei::packet_traits<float>::type;
  constexpr int kChains = 12, kSteps = 1 << 16;
  constexpr Index kLanes = ei::packet_traits<float>::size;
  const int threads = static_cast<int>(state.range(0));
  std::vector<float> sink(static_cast<size_t>(threads) * kLanes);
  for (auto _ : state) {
    retnet::parallel_for(threads, [&](Index t) {
      Packet acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = ei::pset1<Packet>(float(c + t));
      const Packet a = ei::pset1<Packet>(0.999f), b = ei::pset1<Packet>(1e-3f);
      for (int i = 0; i < kSteps; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = ei::pmadd(acc[c], a, b);
      for (int c = 1; c < kChains; ++c) acc[0] = ei::padd(acc[0], acc[c]);
      ei::pstoreu(sink.data() + t * kLanes, acc[0]);
    });
    benchmark::DoNotOptimize(sink.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kChains * kSteps * kLanes * threads * double(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

#ifdef RETNET_BF16_DOTS
// BM_Bf16DotPeak: BM_FmaPeak for vdpbf16ps (AVX512-BF16), the floor of BM_PromptProduct's bf16
// dots: 12 chains, each instruction two multiply-adds per float lane. range(0): threads.
void BM_Bf16DotPeak(benchmark::State& state) {
  constexpr int kChains = 12, kSteps = 1 << 16, kLanes = 16;
  const int threads = static_cast<int>(state.range(0));
  std::vector<float> sink(static_cast<size_t>(threads) * kLanes);
  for (auto _ : state) {
    retnet::parallel_for(threads, [&](Index t) {
      __m512 acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c + t));
      const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);  // 0.996 twice
      const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3a833a83);  // 1e-3 twice
      for (int i = 0; i < kSteps; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
      for (int c = 1; c < kChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
      _mm512_storeu_ps(sink.data() + t * kLanes, acc[0]);
    });
    benchmark::DoNotOptimize(sink.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      4.0 * kChains * kSteps * kLanes * threads * double(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Bf16DotPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

// BM_ReadBandwidth: bytes per second of summing a float array (every thread its own contiguous
// part, as a decode step's threads read their panels). range(0): MiB (the base config's decode
// step reads 141.8 MB; a large last-level cache can hold that whole), range(1): threads.
void BM_ReadBandwidth(benchmark::State& state) {
  namespace ei = Eigen::internal;
  using Packet = ei::packet_traits<float>::type;
  constexpr Index kLanes = ei::packet_traits<float>::size;
  const Index n = state.range(0) << 18;  // floats
  const int threads = static_cast<int>(state.range(1));
  std::vector<float, Eigen::aligned_allocator<float>> data(static_cast<size_t>(n), 1.0f);
  std::vector<float> sink(static_cast<size_t>(threads) * kLanes);
  for (auto _ : state) {
    retnet::parallel_for(threads, [&](Index t) {
      const Index begin = n * t / threads / (4 * kLanes) * (4 * kLanes);
      const Index end = n * (t + 1) / threads / (4 * kLanes) * (4 * kLanes);
      Packet acc[4] = {ei::pset1<Packet>(0), ei::pset1<Packet>(0), ei::pset1<Packet>(0),
                       ei::pset1<Packet>(0)};
      for (Index i = begin; i < end; i += 4 * kLanes)
        for (int j = 0; j < 4; ++j)
          acc[j] = ei::padd(acc[j], ei::pload<Packet>(data.data() + i + j * kLanes));
      ei::pstoreu(sink.data() + t * kLanes,
                  ei::padd(ei::padd(acc[0], acc[1]), ei::padd(acc[2], acc[3])));
    });
    benchmark::DoNotOptimize(sink.data());
  }
  state.counters["GB/s"] = benchmark::Counter(4.0 * double(n) * double(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgsProduct({{40, 142, 1024}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#ifdef RETNET_BENCH_SGEMM
// BM_Sgemm: the machine's BLAS (Debian's libblas.so.3, OpenBLAS where installed) on the shapes
// of BM_PromptProduct: y[256, n] = x[256, k] · Wᵀ with W row-major [n, k]. range(0): threads.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

void BM_Sgemm(benchmark::State& state) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set(static_cast<int>(state.range(0)));
  const int rows = 256;
  std::vector<std::pair<int, int>> shapes = {
      {32000, 512}, {512, 512}, {864, 512}, {512, 864}, {864, 512}};
  std::vector<retnet::Matrix<float>> w, x, y;
  double flops = 0;
  for (auto [n, k] : shapes) {
    w.push_back(retnet::Matrix<float>::Random(n, k));
    x.push_back(retnet::Matrix<float>::Random(rows, k));
    y.push_back(retnet::Matrix<float>(rows, n));
    flops += 2.0 * rows * n * k;
  }
  const float one = 1, zero = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      // Column-major view: yᵀ[n, rows] = W[n, k] (W row-major is Wᵀ column-major) · xᵀ[k, rows].
      const int n = shapes[i].first, k = shapes[i].second;
      sgemm_("T", "N", &n, &rows, &k, &one, w[i].data(), &k, x[i].data(), &k, &zero, y[i].data(),
             &n);
    }
    benchmark::DoNotOptimize(y.back().data());
  }
  state.SetLabel("BLAS sgemm");
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sgemm)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

// The products of BM_PromptProduct and BM_DecodeProduct with the weights in each type.
// range(0): rows of x (1-16: a decoding batch; 256: a prompt chunk); range(1): the WeightType
// (0 f32, 1 bf16, 2 q8, 3 q4, 4 f16); range(2): threads.
void BM_TypedProduct(benchmark::State& state) {
  const Index rows = state.range(0);
  const auto type = static_cast<retnet::WeightType>(state.range(1));
  const int before = retnet::num_threads();
  retnet::set_num_threads(static_cast<int>(state.range(2)));
  static const DecodeWeights f32;
  std::vector<retnet::LinearWeight<float>> panels;
  double bytes = 0, flops = 0;
  for (const auto& m : f32.matrices) {
    panels.emplace_back(m, type);
    bytes += double(panels.back().stored_bytes());
    flops += 2.0 * double(rows) * double(m.size());
  }
  const retnet::Matrix<float> x512 = retnet::Matrix<float>::Random(rows, 512);
  const retnet::Matrix<float> x864 = retnet::Matrix<float>::Random(rows, 864);
  retnet::Matrix<float> y;
  for (auto _ : state) {
    for (const auto& w : panels) {
      retnet::linear(w.cols() == 512 ? x512 : x864, w, y);
      benchmark::DoNotOptimize(y.data());
    }
  }
  retnet::set_num_threads(before);
  state.SetLabel(retnet::weight_type_name(type));
  state.counters["GB/s"] =
      benchmark::Counter(bytes * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TypedProduct)
    ->ArgsProduct({{1, 8, 256}, {0, 1, 2, 3, 4}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// Eigen's GEMM at T = 256 only: it is the slow side, there to show what the panels gain.
BENCHMARK(BM_PromptProduct)
    ->ArgsProduct({{1, 2}, {0, 2, 3}, {256, 512, 2048}})
    ->ArgsProduct({{1, 2}, {1}, {256}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeProduct)->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParallelRetention)
    ->RangeMultiplier(2)
    ->Range(256, 8192)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ChunkwiseRetention)
    ->ArgsProduct({benchmark::CreateRange(256, 8192, 2), {64, 256}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StateStep)
    ->ArgsProduct({{1, 24}, {1, 16}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RecurrentRetention)
    ->RangeMultiplier(2)
    ->Range(256, 8192)
    ->Unit(benchmark::kMillisecond);
