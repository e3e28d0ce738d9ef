// Text generation: the prompt goes through the chunkwise form (bounded memory, matrix
// products), its state is handed to the recurrent form, and tokens are then decoded one at a
// time in O(1) time and memory each.
//
// A generation is (model state, pending token): the state has read everything before the
// pending token, which is the last prompt token at first, then each sampled token. That pair,
// with the recent tokens for the repetition penalty, is all that is saved to resume later.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/model/retnet_model.hpp"
#include "retnet/text/sampler.hpp"
#include "retnet/text/text_stream.hpp"
#include "retnet/text/tokenizer.hpp"

namespace retnet {

struct GenerationParams {
  int64_t max_new_tokens = 128;
  SamplerParams sampler;
  Form prompt_form = Form::kChunkwise;
  Index chunk_size = 0;                   // <= 0: the config's recurrent_chunk_size
  std::vector<std::string> stop_strings;  // generation stops before any of these
  std::vector<int32_t> end_tokens;        // stops (without emitting it) on any of these
};

enum class StopReason { kTokenBudget, kEndToken, kStopString };

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens (without the prompt)
  std::string text;             // their text, cut before a stop string
  StopReason reason = StopReason::kTokenBudget;
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0, decode_seconds = 0;
};

/// The ids a model may generate with `tokenizer`: those it can decode, below its vocab_size()
/// (a model's padded vocabulary may be larger) and none of the gaps in its ids.
inline SampleableIds sampleable_ids(const Tokenizer& tokenizer) {
  SampleableIds ids;
  ids.limit = tokenizer.vocab_size();
  for (int64_t id = 0; id < ids.limit; ++id)
    if (!tokenizer.has_id(static_cast<int32_t>(id)))
      ids.excluded.push_back(static_cast<int32_t>(id));
  return ids;
}

/// Called with (sequence index, token, text piece) as text becomes final.
using TokenCallback = std::function<void(Index, int32_t, const std::string&)>;

/// Reads prompts and generates text with one model. The model is shared (const); a Generator
/// owns its workspace, so each thread uses its own Generator. It samples only ids the tokenizer
/// can decode (sampleable_ids); scoring is unaffected.
template <typename Scalar>
class Generator {
 public:
  Generator(const RetNetModel<Scalar>& model, const Tokenizer& tokenizer)
      : model_(model), tokenizer_(tokenizer), sampleable_(sampleable_ids(tokenizer)) {}

  /// Encodes `prompt` and reads all but its last token (chunkwise by default): the state that
  /// decoding starts from, with the time it took.
  GenerationState<Scalar> read_prompt(std::string_view prompt, const GenerationParams& params) {
    const auto t0 = std::chrono::steady_clock::now();
    GenerationState<Scalar> g = prefill(tokenizer_.encode(prompt), params);
    g.prompt_seconds = seconds_since(t0);
    return g;
  }

  /// Appends `text` to a generation (one loaded from a file, say), timed like read_prompt.
  void continue_with(GenerationState<Scalar>& g, std::string_view text,
                     const GenerationParams& params) {
    const auto t0 = std::chrono::steady_clock::now();
    extend(g, tokenizer_.encode(text), params);
    g.prompt_seconds = seconds_since(t0);
  }

  /// As read_prompt, from token ids.
  GenerationState<Scalar> prefill(const std::vector<int32_t>& prompt,
                                  const GenerationParams& params) {
    RETNET_REQUIRE(!prompt.empty(), "generate: the prompt is empty (0 tokens)");
    GenerationState<Scalar> g;
    g.model = model_.new_state(1);
    g.pending = prompt.front();
    extend(g, std::vector<int32_t>(prompt.begin() + 1, prompt.end()), params);
    g.recent = prompt;
    g.prompt_tokens = static_cast<int64_t>(prompt.size());
    return g;
  }

  /// As continue_with, from token ids: the pending token and all but the last new token are
  /// read in the prompt form (chunkwise when that is parallel and the state is not fresh); the
  /// last one becomes pending.
  void extend(GenerationState<Scalar>& g, const std::vector<int32_t>& tokens,
              const GenerationParams& params) {
    g.prompt_tokens = static_cast<int64_t>(tokens.size());
    if (tokens.empty()) return;
    std::vector<int32_t> ids{g.pending};
    ids.insert(ids.end(), tokens.begin(), tokens.end() - 1);
    const TokenMatrix m = Eigen::Map<const TokenMatrix>(ids.data(), 1, Index(ids.size()));
    const bool fresh = g.model.positions.at(0) == 0;
    const Form form =
        params.prompt_form == Form::kParallel && !fresh ? Form::kChunkwise : params.prompt_form;
    model_.forward_segments(
        m, form, params.chunk_size, g.model, workspace_, [](Index, Index, const Matrix<Scalar>&) {},
        LogitsMode::kNone);
    g.pending = tokens.back();
    g.recent.insert(g.recent.end(), tokens.begin(), tokens.end());
  }

  /// Generates from one prompt.
  GenerationResult generate(std::string_view prompt, const GenerationParams& params,
                            const TokenCallback& on_token = {}) {
    return std::move(generate_batch({std::string(prompt)}, params, on_token).front());
  }

  /// Generates from several prompts of any lengths: each prompt is read on its own, then all
  /// are decoded together, one batched step per token.
  std::vector<GenerationResult> generate_batch(const std::vector<std::string>& prompts,
                                               const GenerationParams& params,
                                               const TokenCallback& on_token = {}) {
    RETNET_REQUIRE(!prompts.empty(), "generate: no prompts given");
    std::vector<GenerationState<Scalar>> states;
    for (const auto& p : prompts) states.push_back(read_prompt(p, params));
    return decode(states, params, on_token);
  }

  /// Decodes one prepared state; `state` is left where the generation stopped.
  GenerationResult decode(GenerationState<Scalar>& state, const GenerationParams& params,
                          const TokenCallback& on_token = {}) {
    std::vector<GenerationState<Scalar>> states{std::move(state)};
    auto results = decode(states, params, on_token);
    state = std::move(states.front());
    return std::move(results.front());
  }

  /// Decodes prepared states (e.g. loaded from a file), one batched step per token. Sequence b
  /// samples with seed + b. Each state is left where its generation stopped.
  std::vector<GenerationResult> decode(std::vector<GenerationState<Scalar>>& states,
                                       const GenerationParams& params,
                                       const TokenCallback& on_token = {}) {
    params.sampler.validate();
    RETNET_REQUIRE(!states.empty(), "generate: no sequences to decode");
    const Index batch = static_cast<Index>(states.size());
    std::vector<ModelState<Scalar>> parts;
    for (auto& s : states) parts.push_back(s.model);
    ModelState<Scalar> state = ModelState<Scalar>::concatenate(parts);
    std::vector<Sampler> samplers;
    std::vector<int32_t> next(static_cast<size_t>(batch));
    std::vector<Stream> streams(static_cast<size_t>(batch),
                                Stream{TextStream(params.stop_strings)});
    std::vector<GenerationResult> results(static_cast<size_t>(batch));
    for (Index b = 0; b < batch; ++b) {
      SamplerParams sp = params.sampler;
      sp.seed += static_cast<uint64_t>(b);  // independent streams, reproducible per sequence
      samplers.emplace_back(sp, sampleable_);
      next[b] = states[b].pending;
      results[b].prompt_tokens = states[b].prompt_tokens;
      results[b].prompt_seconds = states[b].prompt_seconds;
    }
    std::vector<float> row(static_cast<size_t>(model_.config().vocab_size));
    const auto t0 = std::chrono::steady_clock::now();
    Index running = batch;
    for (int64_t produced = 0; produced < params.max_new_tokens && running > 0; ++produced) {
      model_.step(next, state, workspace_, logits_);
      for (Index b = 0; b < batch; ++b) {
        if (streams[b].done) continue;
        for (Index i = 0; i < logits_.cols(); ++i) row[i] = static_cast<float>(logits_(b, i));
        const int32_t token =
            samplers[b].sample(row.data(), static_cast<int64_t>(row.size()), states[b].recent);
        states[b].recent.push_back(token);
        next[b] = token;
        if (std::find(params.end_tokens.begin(), params.end_tokens.end(), token) !=
            params.end_tokens.end()) {
          finish(b, streams[b], results[b], StopReason::kEndToken, on_token);
          --running;
          continue;
        }
        results[b].tokens.push_back(token);
        if (emit(b, token, streams[b], on_token)) {
          finish(b, streams[b], results[b], StopReason::kStopString, on_token);
          --running;
        } else if (produced + 1 == params.max_new_tokens) {
          finish(b, streams[b], results[b], StopReason::kTokenBudget, on_token);
        }
      }
    }
    const double decode_seconds = seconds_since(t0);
    for (Index b = 0; b < batch; ++b) {
      if (!streams[b].done) finish(b, streams[b], results[b], StopReason::kTokenBudget, on_token);
      results[b].decode_seconds = decode_seconds;
      states[b].model = state.select(b);
      states[b].pending = next[b];
    }
    return results;
  }

 private:
  struct Stream {
    TextStream text;
    bool done = false;
    int32_t last_token = 0;
  };

  /// Hands on the text that became final; returns true when a stop string has appeared.
  bool emit(Index b, int32_t token, Stream& s, const TokenCallback& on_token) const {
    s.last_token = token;
    std::string piece;
    const bool stopped = s.text.push(tokenizer_.decode_token(token), piece);
    if (!piece.empty() && on_token) on_token(b, token, piece);
    return stopped;
  }

  static void finish(Index b, Stream& s, GenerationResult& r, StopReason reason,
                     const TokenCallback& on_token) {
    if (s.done) return;
    s.done = true;
    const std::string rest = s.text.finish();
    if (!rest.empty() && on_token) on_token(b, s.last_token, rest);
    r.text = s.text.text();
    r.reason = reason;
  }

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  const RetNetModel<Scalar>& model_;
  const Tokenizer& tokenizer_;
  SampleableIds sampleable_;
  Workspace<Scalar> workspace_;
  Matrix<Scalar> logits_;
};

}  // namespace retnet
