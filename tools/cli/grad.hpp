// `retnet grad`: the mean next-token cross-entropy of one sequence and its gradient with respect
// to every parameter, written as a safetensors file under the folder's own tensor names — the
// check of the training backward against other frameworks, and its memory benchmark.
#pragma once

#include <iostream>
#include <optional>
#include <retnet/io/safetensors_writer.hpp>
#include <retnet/model/dense_weights.hpp>
#include <retnet/model/model_gradients.hpp>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "load_progress.hpp"

namespace retnet::cli {

struct GradFlags {
  std::string model;
  std::optional<std::string> text, tokens;
  std::string out;
  Form mode;
  std::optional<Index> chunk_size;
  std::optional<int> threads;
  bool recompute;

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.optional(text, "--text", "S", "the text (through the model's tokenizer)");
    f.optional(tokens, "--tokens", "LIST", "comma-separated token ids (no tokenizer needed)");
    f.required(out, "--out", "F.safetensors", "where to write the float32 gradients");
    f.choice(mode, "--mode", "M", Form::kChunkwise, kAllForms, "parallel | chunkwise | recurrent");
    // --chunk as `retnet train` spells it; --chunk-size as score, bench and generate do.
    f.optional(chunk_size, "--chunk-size|--chunk", "C", {1, 1 << 20},
               "chunk size of the chunkwise form (default: the config's)");
    tools::declare_threads(f, threads);
    f.toggle(recompute, "--recompute",
             "keep only each segment's layer inputs and recompute the rest in the backward");
  }
};

/// The ids: --tokens as given, --text through the model's tokenizer; each checked against vocab.
inline std::vector<int32_t> grad_input(const GradFlags& flags, int64_t vocab) {
  if (flags.text.has_value() + flags.tokens.has_value() != 1)
    throw UsageError("grad: give exactly one of --text, --tokens");
  std::vector<int32_t> ids = flags.tokens ? parse_token_list(*flags.tokens, "grad: --tokens")
                                          : load_tokenizer(flags.model, vocab)->encode(*flags.text);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw UsageError("grad: token " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                       ", outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
  if (ids.size() < 2)
    throw UsageError("grad: " + std::to_string(ids.size()) +
                     " token(s); at least 2 are needed (the first is only context)");
  return ids;
}

/// Writes every gradient as float32 under the name its tensor has in the folder `dir` (prefix and
/// output alias as stored), in the checkpoint walk's order. Returns the number of tensors.
inline size_t save_gradients(const std::string& path, const std::string& dir, const ModelConfig& c,
                             const DenseModelWeights<float>& grads) {
  const CheckpointReader reader(dir);
  std::vector<SavedTensor> tensors;
  grads.visit(c, [&](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
    tensors.push_back({reader.info(name).name, DType::F32, shape, t.data(), nullptr});
  });
  save_safetensors(path, tensors);
  return tensors.size();
}

inline int grad(const GradFlags& flags) {
  set_threads(flags.threads);
  const Model model = tools::load_model_showing_progress(flags.model, LoadOptions{});
  const ModelConfig& c = model.config();
  const std::vector<int32_t> ids = grad_input(flags, c.vocab_size);
  DenseModelWeights<float> grads;
  double nats = 0;
  {
    const DenseModelWeights<float> w = dense_weights(c, model.weights());
    GradientOptions o;
    o.form = flags.mode;
    o.chunk_size = flags.chunk_size.value_or(0);
    o.recompute = flags.recompute;
    nats = sequence_loss_and_gradients(c, w, ids, o, grads);
  }
  if (!std::isfinite(nats)) throw Error("grad: the loss is not finite (NaN or inf)");
  const size_t count = save_gradients(flags.out, flags.model, c, grads);
  const nlohmann::json j = {{"nats_per_token", nats},
                            {"predicted_tokens", static_cast<int64_t>(ids.size()) - 1},
                            {"tensors", count}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace retnet::cli
