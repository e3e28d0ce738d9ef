// `retnet score`: how well the model predicts a sequence, each token from the ones before it
// (nats and bits per token, perplexity), and optionally every row of logits as a .npy file.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "cli/npy_writer.hpp"
#include "load_progress.hpp"

namespace retnet::cli {

struct ScoreFlags {
  std::string model;
  std::optional<std::string> text, file, tokens;
  Form mode;
  std::optional<Index> chunk_size;
  std::optional<int> threads;
  LoadOptions load;  // --weights, --bf16-dots
  std::optional<std::string> logits_out;
  bool json;

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.optional(text, "--text", "S", "the text to score");
    f.optional(file, "--file", "PATH", "a regular file to score (at most 256 MiB)");
    f.optional(tokens, "--tokens", "LIST", "comma-separated token ids (no tokenizer needed)");
    f.choice(mode, "--mode", "M", Form::kChunkwise, kAllForms, "parallel | chunkwise | recurrent");
    declare_chunk_size(f, chunk_size);
    tools::declare_threads(f, threads);
    tools::declare_load(f, load);
    f.optional(logits_out, "--logits-out", "F.npy",
               "write float32 logits [T, vocab]; row t = logits after reading token t");
    f.toggle(json, "--json", "print one JSON object instead of text");
  }
};

/// The ids to score: --tokens as given; --text and --file through the model's tokenizer.
inline std::vector<int32_t> score_input(const ScoreFlags& flags, int64_t vocab) {
  const int sources = flags.text.has_value() + flags.file.has_value() + flags.tokens.has_value();
  if (sources != 1) throw UsageError("score: give exactly one of --text, --file, --tokens");
  if (flags.tokens) return parse_token_list(*flags.tokens, "score: --tokens");
  const auto tokenizer = load_tokenizer(flags.model, vocab);
  if (flags.text) return tokenizer->encode(*flags.text);
  return tokenizer->encode(read_regular_file(*flags.file, kMaxTextFileBytes, "--file"));
}

/// Sum over t of -log p(token t+1 | tokens <= t), the logits written to `logits_out` if given.
inline double negative_log_likelihood(const Model& model, const std::vector<int32_t>& ids,
                                      Form form, Index chunk_size, NpyWriter* logits_out) {
  const Index time = static_cast<Index>(ids.size());
  const Index vocab = model.config().vocab_size;
  const Eigen::Map<const TokenMatrix> tokens(ids.data(), 1, time);
  double nll = 0;
  const bool progress = time > 4096;
  auto state = model.new_state(1);
  Workspace<float> ws;
  model.forward_segments(
      tokens, form, chunk_size, state, ws,
      [&](Index start, Index len, const Matrix<float>& logits) {
        for (Index r = 0; r < len; ++r) {
          const Index t = start + r;
          if (t + 1 < time) {
            const auto row = logits.row(r);
            const double max = row.maxCoeff();
            const double log_sum = max + std::log((row.array().cast<double>() - max).exp().sum());
            nll += log_sum - row(ids[t + 1]);
          }
        }
        if (logits_out) logits_out->write(logits.data(), len * vocab);
        if (progress)
          std::fprintf(stderr, "\rscored %ld / %ld tokens", long(start + len), long(time));
      });
  if (progress) std::fputc('\n', stderr);
  return nll;
}

inline int score(const ScoreFlags& flags) {
  set_threads(flags.threads);
  const Model model = tools::load_model_showing_progress(flags.model, flags.load);
  const Index vocab = model.config().vocab_size;
  const std::vector<int32_t> ids = score_input(flags, vocab);
  const Index time = static_cast<Index>(ids.size());
  if (time < 2)
    throw UsageError("score: " + std::to_string(time) +
                     " token(s) to score; at least 2 are needed (the first is only context)");
  std::unique_ptr<NpyWriter> logits_out;
  if (flags.logits_out)
    logits_out = std::make_unique<NpyWriter>(*flags.logits_out, std::vector<int64_t>{time, vocab});
  const auto t0 = std::chrono::steady_clock::now();
  const double nll = negative_log_likelihood(model, ids, flags.mode, flags.chunk_size.value_or(0),
                                             logits_out.get());
  if (logits_out) logits_out->close();
  if (!std::isfinite(nll))
    throw Error("the model's logits are not finite (NaN or inf): nothing to report");
  const double seconds = seconds_since(t0);
  const int64_t predicted = time - 1;
  const double nats = nll / double(predicted);
  if (flags.json) {
    nlohmann::json j = {{"tokens", time},
                        {"predicted_tokens", predicted},
                        {"nats_per_token", nats},
                        {"bits_per_token", nats / std::log(2.0)},
                        {"perplexity", std::exp(nats)},
                        {"mode", form_name(flags.mode)},
                        {"seconds", seconds},
                        {"tokens_per_s", time / std::max(seconds, 1e-9)}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("tokens %ld, nats/token %.4f, bits/token %.4f, perplexity %.3f (%s, %.2f s)\n",
                long(time), nats, nats / std::log(2.0), std::exp(nats), form_name(flags.mode),
                seconds);
  }
  return 0;
}

}  // namespace retnet::cli
