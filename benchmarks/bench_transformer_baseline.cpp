// The paper's inference-cost claim on CPU: one decoding step of a Transformer (KV cache) gets
// slower and its cache bigger as the context grows, while RetNet's recurrent step and state stay
// flat. Both models are float32 with the base config's sizes (benchmarks/configs/base.json:
// d 512, 6 layers, vocab 32000, untied output); the Transformer has 2 heads of 256 (RetNet's head
// geometry), q, k, v, o of [d, d] and a GLU FFN widened from 864 to 1392 for parameter parity
// (TransformerConfig::matched; both counts are printed as the `params` counter).
//
// Time is wall-clock (UseRealTime: OpenMP threads; set OMP_NUM_THREADS to pin the count) and
// one iteration is one token, so the time column is the latency per token in ms.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <memory>
#include <retnet/retnet.hpp>

#include "bench_common.hpp"
#include "transformer_baseline.hpp"

namespace {

using retnet::Index;
using retnet::Matrix;
using retnet_baseline::KVCache;
using retnet_baseline::TransformerConfig;
using retnet_baseline::TransformerModel;
using retnet_baseline::TransformerWeights;

constexpr Index kMaxContext = 8192;

using retnet_bench::base_config;

using retnet_bench::Clock;
using retnet_bench::ms_per_iteration;
using retnet_bench::token_at;

// ---- Transformer ---------------------------------------------------------------------------

struct Baseline {
  TransformerModel<float> model;
  KVCache<float> cache;  // room for the longest context plus the decoded token
  explicit Baseline(const TransformerConfig& c)
      : model(c, TransformerWeights<float>::random(c, 1)), cache(model.new_cache(kMaxContext + 1)) {
    cache.fill_random(kMaxContext, 2);  // any prefix of it is a valid cache of that length
  }
};

Baseline& baseline() {
  static Baseline b(TransformerConfig::matched(base_config(), 2));
  return b;
}

void BM_TransformerDecodeAtContext(benchmark::State& state) {
  auto& b = baseline();
  const Index context = state.range(0);
  Matrix<float> logits;
  b.cache.length = context;  // positions [0, context) hold valid (random or decoded) K/V
  b.model.step(token_at(context, b.model.config().vocab_size), b.cache, logits);  // sizes buffers
  const auto started = Clock::now();
  for (auto _ : state) {
    b.cache.length = context;  // every step attends over the same context + 1 positions
    b.model.step(token_at(context, b.model.config().vocab_size), b.cache, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["ms_per_token"] = ms_per_iteration(state, started);
  state.SetItemsProcessed(state.iterations());
  b.cache.length = context;
  state.counters["kv_cache_bytes"] = double(b.cache.bytes_used());
  state.counters["params"] = double(b.model.config().parameter_count());
}

// ---- RetNet --------------------------------------------------------------------------------

struct RetNet {
  retnet::RetNetModel<float> model{base_config(),
                                   retnet::ModelWeights<float>::random(base_config(), 1)};
  std::map<Index, retnet::ModelState<float>> prefilled;  // state after `context` tokens

  /// The state after the first `context` tokens of token_at's stream, by a chunkwise prefill
  /// (chunk 256) continued from the longest shorter context already prefilled.
  const retnet::ModelState<float>& state_at(Index context) {
    if (auto it = prefilled.find(context); it != prefilled.end()) return it->second;
    auto from = prefilled.lower_bound(context);
    auto state = from == prefilled.begin() ? model.new_state(1) : std::prev(from)->second;
    const Index start = state.positions[0];
    retnet::TokenMatrix tokens(1, context - start);
    for (Index t = 0; t < tokens.cols(); ++t)
      tokens(0, t) = token_at(start + t, model.config().vocab_size);
    Matrix<float> none;
    retnet::Workspace<float> ws;
    model.forward(tokens, retnet::Form::kChunkwise, 256, state, ws, none,
                  retnet::LogitsMode::kNone);
    return prefilled.emplace(context, std::move(state)).first->second;
  }
};

RetNet& retnet_model() {
  static RetNet r;
  return r;
}

void BM_RetNetDecodeAtContext(benchmark::State& state) {
  auto& r = retnet_model();
  const Index context = state.range(0);
  auto s = r.state_at(context);
  Matrix<float> logits;
  retnet::Workspace<float> ws;
  const std::vector<int32_t> token{token_at(context, r.model.config().vocab_size)};
  r.model.step(token, s, ws, logits);  // sizes the buffers
  // The state's size and a step's cost do not depend on the position, so the state simply
  // advances by one token per iteration.
  const auto started = Clock::now();
  for (auto _ : state) {
    r.model.step(token, s, ws, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["ms_per_token"] = ms_per_iteration(state, started);
  state.counters["state_bytes"] = double(s.size_bytes());
  state.counters["params"] = double(r.model.weights().size_bytes(r.model.config()) / sizeof(float));
}

void contexts(benchmark::internal::Benchmark* b) {
  for (Index c : {16, 256, 1024, 2048, 4096, 8192}) b->Arg(c);
  b->ArgName("context")->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK(BM_TransformerDecodeAtContext)->Apply(contexts);
BENCHMARK(BM_RetNetDecodeAtContext)->Apply(contexts);
