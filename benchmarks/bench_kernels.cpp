// The three retention kernels over sequence length T (one batch entry, the base config's heads:
// 2 heads, dk 256, dv 432). Reports tokens per second; the parallel form is O(T²).
#include <benchmark/benchmark.h>

#include <random>
#include <retnet/retnet.hpp>

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

}  // namespace

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
