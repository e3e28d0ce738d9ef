// `retnet info`: what a model folder holds, from its config and tensor headers (no weight is
// read): family, sizes, parameters, stored dtypes, weight type and tokenizer. The folder is
// checked as a load would check it, so info succeeds only on a folder that loads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <utility>

#include "cli/common.hpp"

namespace retnet::cli {

struct InfoFlags {
  std::string model;
  bool json;

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.toggle(json, "--json", "print one JSON object");
  }
};

/// What reads the folder's text: its tokenizer.json (loaded, so a broken one is reported) or,
/// without one, bytes; and whether the model has a row for each of its ids. A folder whose
/// tokenizer has more ids than the model still serves token ids (score --tokens), so that is
/// said, not refused.
inline std::string tokenizer_kind(const std::string& dir, int64_t model_vocab) {
  const auto tokenizer = load_tokenizer(dir);
  const auto* hf = dynamic_cast<const HfTokenizer*>(tokenizer.get());
  const std::string fit = tokenizer->vocab_size() <= model_vocab
                              ? std::string()
                              : "; more ids than the model's vocab_size " +
                                    std::to_string(model_vocab) +
                                    ": generate and score --text refuse this folder";
  if (!hf) return "byte-level (no tokenizer.json: ids 0-255)" + fit;
  return std::string("tokenizer.json, BPE") +
         (hf->byte_level()      ? ", byte-level"
          : hf->byte_fallback() ? ", byte fallback (SentencePiece style)"
                                : "") +
         ", " + std::to_string(hf->vocab_size()) + " ids" + fit;
}

/// A model folder as `info` reports it.
struct FolderInfo {
  ModelConfig config;
  std::map<std::string, std::pair<int64_t, uint64_t>> dtypes;  // name: tensors, bytes
  int64_t parameters = 0;
  const char* weights = "";
  size_t files = 0;
  std::string tokenizer;
};

/// The folder checked as a load checks it, from the headers alone (no weight is read): every
/// tensor the config asks for present with its shape, nothing else (check_checkpoint_shapes),
/// and a tokenizer that loads.
inline FolderInfo describe_folder(const std::string& dir) {
  CheckpointReader reader(dir);
  FolderInfo info;
  info.config = load_config(dir, reader);
  check_checkpoint_shapes<float>(reader, info.config);
  for (const auto& shard : reader.shards())
    for (const auto& t : shard.tensors()) {
      if (t.name.find("retnet_rel_pos.") != std::string::npos) continue;  // derived buffers
      auto& d = info.dtypes[dtype_name(t.dtype)];
      d.first += 1;
      d.second += t.nbytes();
    }
  // From the config's shapes: quantised tensors store codes and scales.
  info.parameters = parameter_count(info.config);
  info.weights = weight_type_name(stored_weight_type<float>(info.config, reader));
  info.files = reader.shards().size();
  info.tokenizer = tokenizer_kind(dir, info.config.vocab_size);
  return info;
}

inline void print_json(const FolderInfo& info) {
  const ModelConfig& c = info.config;
  nlohmann::json j = {{"family", family_name(c.family)},
                      {"layers", c.layers},
                      {"embed_dim", c.embed_dim},
                      {"heads", c.heads},
                      {"kv_heads", c.key_value_heads()},
                      {"key_head_dim", c.key_head_dim()},
                      {"value_head_dim", c.value_head_dim()},
                      {"ffn_dim", c.ffn_dim},
                      {"vocab_size", c.vocab_size},
                      {"tied_embeddings", c.tie_embeddings},
                      {"parameters", info.parameters},
                      {"weights", info.weights},
                      {"files", info.files},
                      {"tokenizer", info.tokenizer}};
  for (const auto& [name, d] : info.dtypes)
    j["dtypes"][name] = {{"tensors", d.first}, {"bytes", d.second}};
  std::cout << j.dump() << "\n";
}

inline void print_text(const FolderInfo& info) {
  const ModelConfig& c = info.config;
  const bool fla = c.family == Family::kFla;
  const std::string mlp = !c.use_glu        ? "plain FFN"
                          : c.fused_gate_up ? "GLU, gate and up fused in one [2F, d] tensor"
                          : fla             ? "GLU (gate_proj, up_proj)"
                                            : "GLU (fc1, gate)";
  const int64_t parameters = info.parameters;
  std::printf("family      %s\n", family_name(c.family));
  std::printf("layers      %ld, d %ld, heads %ld (key/value heads %ld), dk %ld, dv %ld\n",
              long(c.layers), long(c.embed_dim), long(c.heads), long(c.key_value_heads()),
              long(c.key_head_dim()), long(c.value_head_dim()));
  std::printf("ffn         %ld, %s\n", long(c.ffn_dim), mlp.c_str());
  std::printf("vocab       %ld, %s\n", long(c.vocab_size), c.tie_embeddings ? "tied" : "untied");
  std::printf("parameters  %ld (%.3f %s)\n", long(parameters),
              parameters >= 1e9 ? parameters / 1e9 : parameters / 1e6,
              parameters >= 1e9 ? "B" : "M");
  std::printf("weights     %s\n", info.weights);
  for (const auto& [name, d] : info.dtypes)
    std::printf("stored      %s: %ld tensors, %.1f MB\n", name.c_str(), long(d.first),
                d.second / 1e6);
  std::printf("files       %zu safetensors file(s)\n", info.files);
  std::printf("tokenizer   %s\n", info.tokenizer.c_str());
}

inline int info(const InfoFlags& flags) {
  const FolderInfo folder = describe_folder(flags.model);
  if (flags.json)
    print_json(folder);
  else
    print_text(folder);
  return 0;
}

}  // namespace retnet::cli
