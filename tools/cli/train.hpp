// `retnet train`: trains a model on a text file (docs/TRAINING.md). A new model from a
// config.json (random initial weights; byte-level tokens, or --tokenizer's) or a model folder
// to continue; AdamW
// with warmup and cosine decay, gradient accumulation, held-out evaluation, checkpoints that
// `generate` and `score` load, and --resume, which continues a run exactly where it stopped.
#pragma once

#include <malloc.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "cli/common.hpp"
#include "retnet/train/training_checkpoint.hpp"
#include "retnet/train/weight_init.hpp"

namespace retnet::cli {

struct TrainFlags {
  std::optional<std::string> config, model, tokenizer, heldout;
  std::string data, out;
  int64_t steps, stop_after, batch, seq_len, accumulate, warmup, seed, eval_every, save_every;
  Form mode;
  std::optional<Index> chunk;
  bool recompute, resume;
  double lr, min_lr, weight_decay, clip, beta1, beta2, heldout_fraction, dropout;
  std::optional<int> threads;

  void declare(FlagTable& f) {
    f.optional(config, "--config", "FILE.json", "a new model of this config (random weights)");
    f.optional(model, "-m|--model", "DIR", "a model folder to continue training");
    f.optional(tokenizer, "--tokenizer", "DIR",
               "with --config: the folder of a tokenizer.json for the new model (default: bytes)");
    f.required(data, "--data", "FILE", "the training text (at most 256 MiB)");
    f.required(out, "--out", "DIR", "where checkpoints are written (created if missing)");
    f.value(steps, "--steps", "N", 200, {1, 1000000000}, "optimiser steps");
    f.value(batch, "--batch", "B", 8, {1, 65536}, "sequences per micro-batch");
    f.value(seq_len, "--seq-len", "T", 128, {1, 1 << 20}, "tokens per sequence");
    f.value(accumulate, "--accumulate", "N", 1, {1, 65536}, "micro-batches per step");
    f.choice(mode, "--mode", "M", Form::kChunkwise, kAllForms,
             "form of the forward and backward: parallel | chunkwise | recurrent");
    f.optional(chunk, "--chunk", "C", {1, 1 << 20},
               "chunk of the chunkwise form (default: the config's)");
    f.toggle(recompute, "--recompute", "keep only each segment's inputs; recompute the rest");
    f.value(dropout, "--dropout", "P", 0, {0, 0.99},
            "dropout on each layer's retention and FFN outputs (training only)");
    f.value(lr, "--lr", "X", 1e-3, {0, 10, tools::Bound::kExclusive}, "peak learning rate");
    f.value(min_lr, "--min-lr", "X", 1e-4, {0, 10}, "the cosine decay's floor");
    f.value(warmup, "--warmup", "N", 20, {0, 1000000000}, "steps of linear warmup");
    f.value(weight_decay, "--weight-decay", "X", 0.1, {0, 10},
            "AdamW's decoupled decay (matrices only)");
    f.value(beta1, "--beta1", "X", 0.9, {0, 0.999999}, "AdamW's first-moment decay");
    f.value(beta2, "--beta2", "X", 0.95, {0, 0.999999}, "AdamW's second-moment decay");
    f.value(clip, "--clip", "X", 1.0, {0, 1e6}, "bound of the global gradient norm (0: off)");
    f.value(seed, "--seed", "N", 0, {0, 1000000000000}, "seed of the initial weights and data");
    tools::declare_threads(f, threads);
    f.value(eval_every, "--eval-every", "K", 50, {0, 1000000000},
            "held-out loss every K steps and at the end (0: never)");
    f.optional(heldout, "--heldout", "FILE", "held-out text (default: the end of --data)");
    f.value(heldout_fraction, "--heldout-fraction", "X", 0.1, {0, 0.9},
            "share of --data held out when --heldout is not given");
    f.value(save_every, "--save-every", "K", 0, {0, 1000000000},
            "checkpoint every K steps (0: only at the end)");
    f.toggle(resume, "--resume", "continue the run saved in --out");
    f.value(stop_after, "--stop-after", "N", 0, {0, 1000000000},
            "stop after step N with a checkpoint, as a job with a time limit would (0: run all)");
  }

  TrainOptions options() const {
    TrainOptions o;
    o.batch = batch;
    o.seq_len = seq_len;
    o.accumulate = accumulate;
    o.gradients.form = mode;
    o.gradients.chunk_size = chunk.value_or(0);
    o.gradients.recompute = recompute;
    o.gradients.dropout.rate = dropout;
    o.adamw = {beta1, beta2, 1e-8, weight_decay};
    o.schedule = {lr, min_lr, warmup, steps};
    o.clip = clip;
    o.seed = static_cast<uint64_t>(seed);
    return o;
  }
};

/// The model to train, its tokenizer and the tokens of --data (and the held-out ones).
struct TrainInputs {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  TokenSplit tokens;
};

inline TrainInputs train_inputs(const TrainFlags& f) {
  if (f.config.has_value() == f.model.has_value())
    throw UsageError(
        "train: give one of --config FILE.json (a new model) or -m DIR (continue one)");
  namespace fs = std::filesystem;
  std::error_code ec;
  if (f.model && fs::equivalent(*f.model, f.out, ec))
    throw UsageError("train: --out is the -m folder " + *f.model +
                     "; write the trained model to another folder");
  if (f.tokenizer && f.model)
    throw UsageError("train: --tokenizer is for a new model (--config); -m " + *f.model +
                     " trains with that folder's own tokenizer");
  TrainInputs in;
  if (f.config) in.config = load_config_json(*f.config);
  if (f.config && f.tokenizer) {
    // load_tokenizer reads a folder without tokenizer.json as bytes: here that is a mistake.
    require_folder(*f.tokenizer);
    if (!fs::is_regular_file(fs::path(*f.tokenizer) / "tokenizer.json", ec))
      throw Error("--tokenizer " + *f.tokenizer + ": no tokenizer.json in this folder");
    in.tokenizer = load_tokenizer(*f.tokenizer, in.config.vocab_size);
  } else if (f.config) {
    in.tokenizer = std::make_unique<ByteTokenizer>();
    if (in.config.vocab_size < ByteTokenizer::kVocabSize)
      throw Error(*f.config + ": vocab_size " + std::to_string(in.config.vocab_size) +
                  " is smaller than the 256 ids of the byte-level tokenizer a new model uses");
  } else {
    require_model_folder(*f.model);
    CheckpointReader reader(*f.model);
    in.config = load_config(*f.model, reader);
    in.tokenizer = load_tokenizer(*f.model, in.config.vocab_size);
  }
  in.config.weights = WeightType::kF32;  // trained and saved in float32
  std::vector<int32_t> ids =
      in.tokenizer->encode(read_regular_file(f.data, kMaxTextFileBytes, "--data"));
  if (f.heldout) {
    in.tokens.train = std::move(ids);
    in.tokens.heldout =
        in.tokenizer->encode(read_regular_file(*f.heldout, kMaxTextFileBytes, "--heldout"));
  } else {
    in.tokens = split_heldout(std::move(ids), f.heldout_fraction);
  }
  if (static_cast<int64_t>(in.tokens.train.size()) < f.seq_len + 1)
    throw Error(f.data + ": " + std::to_string(in.tokens.train.size()) +
                " tokens to train on, fewer than one sequence (--seq-len " +
                std::to_string(f.seq_len) + ") plus 1");
  return in;
}

/// The weights to start from: --out's (--resume), -m's, or new ones drawn from --seed.
inline DenseModelWeights<float> starting_weights(const TrainFlags& f, const ModelConfig& config) {
  if (f.resume) {
    CheckpointReader reader(f.out);
    ModelConfig saved = load_config(f.out, reader);
    if (saved.to_json() != config.to_json())
      throw Error("--resume: " + f.out + "/config.json is not the config of " +
                  (f.config ? *f.config : *f.model));
    return dense_weights(saved, load_weights<float>(reader, saved, LoadOptions{WeightType::kF32}));
  }
  if (f.config) return initial_weights<float>(config, static_cast<uint64_t>(f.seed));
  ModelConfig loaded = config;
  return dense_weights(config,
                       load_weights<float>(*f.model, loaded, LoadOptions{WeightType::kF32}));
}

/// "1m05s", "2h03m", "12s".
inline std::string duration_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%lds", s);
  return text;
}

/// Copies the tokenizer's files of -m DIR (or --tokenizer DIR) beside the trained weights, so that
/// the folder is complete for `generate`, `score` and `chat`.
inline void copy_tokenizer_files(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json"}) {
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(from) / name, ec)) continue;
    fs::copy_file(fs::path(from) / name, fs::path(to) / name, fs::copy_options::overwrite_existing,
                  ec);
    if (ec) throw Error(to + "/" + name + ": cannot copy the tokenizer (" + ec.message() + ")");
  }
}

inline int train(const TrainFlags& f) {
  set_threads(f.threads);
  // A training step allocates its layers' activations afresh; glibc would hand blocks of a few
  // MB back to the OS after each use and page-fault them in again, which took half of a demo-
  // model step. Blocks up to 32 MB (glibc's largest threshold) stay in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  TrainInputs in = train_inputs(f);
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  require_folder(f.out);
  DenseModelWeights<float> weights = starting_weights(f, in.config);
  const size_t train_tokens = in.tokens.train.size();
  Trainer<float> trainer(in.config, std::move(weights), std::move(in.tokens.train), f.options());
  if (f.resume) resume_training(f.out, trainer);
  if (f.model || f.tokenizer) copy_tokenizer_files(f.model ? *f.model : *f.tokenizer, f.out);
  std::fprintf(stderr, "training %ld parameters on %zu tokens (%zu held out) from step %ld\n",
               long(parameter_count(in.config)), train_tokens, in.tokens.heldout.size(),
               long(trainer.steps_done()));
  int64_t saved_step = f.resume ? trainer.steps_done() : -1;
  const auto kept = [&] {
    return saved_step >= 0 ? "; the checkpoint of step " + std::to_string(saved_step) + " in " +
                                 f.out + " is kept"
                           : std::string("; nothing was saved");
  };
  const auto save = [&] {
    try {
      save_training_checkpoint(f.out, trainer);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + kept());
    }
    saved_step = trainer.steps_done();
  };
  const int64_t first = trainer.steps_done();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  const int64_t last = f.stop_after > 0 ? std::min(f.stop_after, f.steps) : f.steps;
  while (trainer.steps_done() < last) {
    StepReport r;
    try {
      r = trainer.step();
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + kept());
    }
    tokens += r.tokens;
    std::string line = "step " + std::to_string(r.step) + "/" + std::to_string(f.steps);
    char number[64];
    std::snprintf(number, sizeof number, " loss %.4f", r.loss);
    line += number;
    if (f.eval_every > 0 && in.tokens.heldout.size() >= 2 &&
        (r.step % f.eval_every == 0 || r.step == f.steps)) {
      const LossSum held = trainer.evaluate(in.tokens.heldout, f.chunk.value_or(0));
      std::snprintf(number, sizeof number, " heldout %.4f", held.mean());
      line += number;
    }
    const double elapsed = seconds_since(t0);
    const double per_step = elapsed / double(r.step - first);
    std::snprintf(number, sizeof number, " tok/s %.0f eta ",
                  double(tokens) / std::max(elapsed, 1e-9));
    line += number + duration_text(per_step * double(f.steps - r.step));
    std::fprintf(stderr, "%s\n", line.c_str());
    if ((f.save_every > 0 && r.step % f.save_every == 0) || r.step == last) save();
  }
  if (saved_step < 0) save();
  std::fprintf(stderr, "saved %s (step %ld)\n", f.out.c_str(), long(trainer.steps_done()));
  return 0;
}

}  // namespace retnet::cli
