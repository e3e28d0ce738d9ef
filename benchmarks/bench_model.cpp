// The whole model at the base config (benchmarks/configs/base.json: d 512, Dv 864, 2 heads,
// 6 layers, GLU FFN 864, vocab 32000), float32, random weights built once and shared:
//   BM_MultiScaleRetention  one MSR block (layer 0's weights) over T tokens, parallel / chunkwise
//   BM_PromptParallel       a prompt of T tokens through the decoder in the parallel form
//                           (T up to 4096; the others go to 8192)
//   BM_PromptChunkwise      the same in the chunkwise form (chunk 256, the config's)
//   BM_DecodeAtContext      one recurrent `step` after a prompt of `context` tokens
// Prompt benchmarks report tokens/s (items_per_second); decoding reports ms per token.
// Times are wall-clock (UseRealTime: the kernels and Eigen use OpenMP threads; set
// OMP_NUM_THREADS to pin the count).
//
// Peak memory is not measured here: RSS only grows within a process, so one process running
// many sizes cannot attribute a peak to one of them. Peak memory against T per form comes from
// the `retnet bench --json` subprocesses that benchmarks/scaling.py runs, one per size and form.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <random>
#include <retnet/retnet.hpp>

#include "bench_common.hpp"

namespace {

using retnet::Form;
using retnet::Index;
using retnet::Matrix;

struct Shared {
  retnet::ModelConfig config = retnet_bench::base_config();
  retnet::RetNetModel<float> model{config, retnet::ModelWeights<float>::random(config, 1)};
  std::map<Index, retnet::ModelState<float>> prefilled;  // state after `context` tokens
};

Shared& shared() {
  static Shared s;
  return s;
}

using retnet_bench::Clock;
using retnet_bench::ms_per_iteration;
using retnet_bench::token_at;

retnet::TokenMatrix prompt(Index start, Index time, int64_t vocab) {
  retnet::TokenMatrix tokens(1, time);
  for (Index t = 0; t < time; ++t) tokens(0, t) = token_at(start + t, vocab);
  return tokens;
}

Form form_arg(int64_t f) {
  return f == 0 ? Form::kParallel : Form::kChunkwise;
}

void BM_MultiScaleRetention(benchmark::State& state) {
  auto& s = shared();
  const Index time = state.range(0);
  const Form form = form_arg(state.range(1));
  const auto& weights = s.model.weights().layers[0].retention;
  retnet::RetentionParams<float> params;
  params.heads = s.config.heads, params.key_head_dim = s.config.key_head_dim();
  params.value_head_dim = s.config.value_head_dim();
  params.decays = retnet::default_decays<float>(s.config.heads);
  Matrix<float> x(time, s.config.embed_dim), y;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);  // unit RMS, as after the layer's norm
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
  retnet::SequenceLayout<float> layout;
  layout.set(1, time, {0}, s.config.key_head_dim());
  retnet::RetentionState<float> rs(1, s.config.heads, s.config.key_head_dim(),
                                   params.state_columns());
  retnet::RetentionWorkspace<float> ws;
  for (auto _ : state) {
    rs.setZero();  // a fresh sequence each time (the parallel form requires it)
    retnet::multiscale_retention(params, weights, x, layout, form, rs, ws, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * time);
  state.SetLabel(retnet::form_name(form));
}

void run_prompt(benchmark::State& state, Form form) {
  auto& s = shared();
  const Index time = state.range(0);
  const auto tokens = prompt(0, time, s.config.vocab_size);
  Matrix<float> logits;
  retnet::Workspace<float> ws;
  for (auto _ : state) {
    auto st = s.model.new_state(1);
    // kLast: the output projection runs for the last position only.
    s.model.forward(tokens, form, 0, st, ws, logits, retnet::LogitsMode::kLast);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetItemsProcessed(state.iterations() * time);
  if (form == Form::kChunkwise) state.counters["chunk"] = double(s.config.chunk_size);
}

void BM_PromptParallel(benchmark::State& state) {
  run_prompt(state, Form::kParallel);
}
void BM_PromptChunkwise(benchmark::State& state) {
  run_prompt(state, Form::kChunkwise);
}

/// The state after the first `context` tokens of token_at's stream, by a chunkwise prefill
/// continued from the longest shorter context already prefilled (so each is computed once).
const retnet::ModelState<float>& state_at(Index context) {
  auto& s = shared();
  if (auto it = s.prefilled.find(context); it != s.prefilled.end()) return it->second;
  auto from = s.prefilled.lower_bound(context);
  auto st = from == s.prefilled.begin() ? s.model.new_state(1) : std::prev(from)->second;
  const Index start = st.positions[0];
  Matrix<float> none;
  retnet::Workspace<float> ws;
  s.model.forward(prompt(start, context - start, s.config.vocab_size), Form::kChunkwise, 0, st, ws,
                  none, retnet::LogitsMode::kNone);
  return s.prefilled.emplace(context, std::move(st)).first->second;
}

void BM_DecodeAtContext(benchmark::State& state) {
  auto& s = shared();
  const Index context = state.range(0);
  auto st = state_at(context);  // prefill outside the timed loop
  Matrix<float> logits;
  retnet::Workspace<float> ws;
  const std::vector<int32_t> token{token_at(context, s.config.vocab_size)};
  s.model.step(token, st, ws, logits);  // sizes the step's buffers
  // A step's cost does not depend on the position, so the state just advances each iteration.
  const auto started = Clock::now();
  for (auto _ : state) {
    s.model.step(token, st, ws, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["ms_per_token"] = ms_per_iteration(state, started);
  state.counters["state_bytes"] = double(st.size_bytes());
}

}  // namespace

// Args: {T, form} with form 0 = parallel, 1 = chunkwise.
BENCHMARK(BM_MultiScaleRetention)
    ->ArgsProduct({benchmark::CreateRange(128, 8192, 2), {0, 1}})
    ->ArgNames({"T", "form"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The parallel prompt stops at 4096: from the 4096 run, 8192 would take about 25 s for its one
// iteration on one core (the O(T²) retention of 6 layers: 4× that of 4096) for a trend already
// clear by 4096; BM_MultiScaleRetention runs one block's parallel form up to 8192.
BENCHMARK(BM_PromptParallel)
    ->RangeMultiplier(2)
    ->Range(128, 4096)
    ->ArgName("T")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PromptChunkwise)
    ->RangeMultiplier(2)
    ->Range(128, 8192)
    ->ArgName("T")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DecodeAtContext)
    ->Arg(16)
    ->Arg(1024)
    ->Arg(8192)
    ->ArgName("context")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
