// Model hyper-parameters, read from a torchscale / HF RetNet `config.json`.
// Keys and defaults: docs/NUMERICS.md#config-keys. Most defaults where a key is absent are
// torchscale's RetNetConfig; that table names the two that are not (subln, recurrent_chunk_size).
#pragma once

#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/core/json.hpp"
#include "retnet/ops/activation.hpp"
#include "retnet/ops/norm.hpp"

namespace retnet {

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t embed_dim = 0;        // d: decoder_embed_dim
  int64_t value_embed_dim = 0;  // Dv: decoder_value_embed_dim
  int64_t heads = 0;            // H: decoder_retention_heads
  int64_t ffn_dim = 0;          // F: decoder_ffn_embed_dim
  int64_t layers = 0;           // L: decoder_layers
  Activation activation = Activation::kGelu;
  NormKind norm = NormKind::kRMSNorm;
  double eps = 1e-6;
  bool scale_embedding = false;      // !no_scale_embedding
  bool layernorm_embedding = false;  // RMSNorm (or LayerNorm) after the embedding
  bool tie_embeddings = false;       // share_decoder_input_output_embed | tie_word_embeddings
  bool use_glu = true;               // GLU FFN (torchscale); false: plain FFN with biases
  bool subln = false;                // plain FFN only: LayerNorm after the activation
  int64_t chunk_size = 64;           // recurrent_chunk_size: default chunk of the chunkwise form

  int64_t key_head_dim() const { return embed_dim / heads; }
  int64_t value_head_dim() const { return value_embed_dim / heads; }

  /// Throws FormatError naming the first inconsistent field.
  void validate() const {
    auto positive = [](int64_t v, const char* key) {
      if (v <= 0)
        throw FormatError(std::string("config: ") + key + " must be > 0, found " +
                          std::to_string(v));
    };
    positive(vocab_size, "vocab_size");
    positive(embed_dim, "decoder_embed_dim");
    positive(value_embed_dim, "decoder_value_embed_dim");
    positive(heads, "decoder_retention_heads");
    positive(ffn_dim, "decoder_ffn_embed_dim");
    positive(layers, "decoder_layers");
    positive(chunk_size, "recurrent_chunk_size");
    // Bounds far above any published model, so that products of sizes stay exact in int64.
    const auto at_most = [](int64_t v, int64_t limit, const char* key) {
      if (v > limit)
        throw FormatError(std::string("config: ") + key + " = " + std::to_string(v) +
                          " is above the supported " + std::to_string(limit));
    };
    at_most(vocab_size, int64_t(1) << 31, "vocab_size");
    for (const auto& [v, key] : {std::pair<int64_t, const char*>{embed_dim, "decoder_embed_dim"},
                                 {value_embed_dim, "decoder_value_embed_dim"},
                                 {ffn_dim, "decoder_ffn_embed_dim"}})
      at_most(v, int64_t(1) << 20, key);
    at_most(heads, 4096, "decoder_retention_heads");
    at_most(layers, 4096, "decoder_layers");
    if (embed_dim % heads != 0)
      throw FormatError("config: decoder_embed_dim " + std::to_string(embed_dim) +
                        " is not divisible by decoder_retention_heads " + std::to_string(heads));
    if (value_embed_dim % heads != 0)
      throw FormatError("config: decoder_value_embed_dim " + std::to_string(value_embed_dim) +
                        " is not divisible by decoder_retention_heads " + std::to_string(heads));
    if (key_head_dim() % 2 != 0)
      throw FormatError("config: key head size decoder_embed_dim / decoder_retention_heads = " +
                        std::to_string(key_head_dim()) + " must be even (rotation works on pairs)");
    if (!(eps > 0)) throw FormatError("config: layernorm_eps must be > 0");
  }

  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "config.json") {
    if (!j.is_object()) throw FormatError(source + ": expected a JSON object");
    ModelConfig c;
    auto required = [&](const char* key) -> int64_t {
      if (!j.contains(key)) throw FormatError(source + ": missing required key \"" + key + "\"");
      const nlohmann::json& v = j[key];
      if (!v.is_number_integer())
        throw FormatError(source + ": key \"" + key + "\" must be an integer, found " +
                          json_excerpt(v));
      if (v.is_number_unsigned() &&
          v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw FormatError(source + ": key \"" + key + "\" = " + json_excerpt(v) +
                          " does not fit in 64-bit signed integers");
      return v.get<int64_t>();
    };
    auto flag = [&](const char* key, bool fallback) {
      if (!j.contains(key) || j[key].is_null()) return fallback;
      if (!j[key].is_boolean())
        throw FormatError(source + ": key \"" + key + "\" must be a boolean");
      return j[key].get<bool>();
    };
    c.vocab_size = required("vocab_size");
    c.embed_dim = required("decoder_embed_dim");
    c.value_embed_dim = required("decoder_value_embed_dim");
    c.heads = required("decoder_retention_heads");
    c.ffn_dim = required("decoder_ffn_embed_dim");
    c.layers = required("decoder_layers");
    if (j.contains("activation_fn")) {
      if (!j["activation_fn"].is_string())
        throw FormatError(source + ": activation_fn must be a string");
      const std::string a = j["activation_fn"];
      if (a == "gelu")
        c.activation = Activation::kGelu;
      else if (a == "swish" || a == "silu")
        c.activation = Activation::kSwish;
      else
        throw FormatError(source + ": activation_fn " + excerpt(a) + " is not gelu or swish");
    }
    if (j.contains("norm_type") && !j["norm_type"].is_null()) {
      if (!j["norm_type"].is_string()) throw FormatError(source + ": norm_type must be a string");
      const std::string n = j["norm_type"];
      if (n == "rmsnorm")
        c.norm = NormKind::kRMSNorm;
      else if (n == "layernorm")
        c.norm = NormKind::kLayerNorm;
      else
        throw FormatError(source + ": norm_type " + excerpt(n) + " is not rmsnorm or layernorm");
    }
    if (j.contains("layernorm_eps")) {
      if (!j["layernorm_eps"].is_number())
        throw FormatError(source + ": layernorm_eps must be a number");
      c.eps = j["layernorm_eps"].get<double>();
    }
    c.scale_embedding = !flag("no_scale_embedding", true);
    c.layernorm_embedding = flag("layernorm_embedding", false);
    c.tie_embeddings =
        flag("share_decoder_input_output_embed", false) || flag("tie_word_embeddings", false);
    c.use_glu = flag("use_glu", true);
    c.subln = flag("subln", false);
    if (j.contains("recurrent_chunk_size") && !j["recurrent_chunk_size"].is_null())
      c.chunk_size = required("recurrent_chunk_size");
    c.validate();
    return c;
  }

  /// Largest config.json read (real ones are a few KB); checked before the file is read.
  static constexpr uint64_t kMaxFileBytes = 16ull << 20;

  /// Reads `path`, a regular file of at most kMaxFileBytes holding one JSON object of bounded
  /// depth without duplicate keys (see parse_json), and converts it with from_json.
  static ModelConfig load(const std::string& path) {
    return from_json(parse_json(read_regular_file(path, kMaxFileBytes, "config"), path), path);
  }

  nlohmann::json to_json() const {
    return {{"vocab_size", vocab_size},
            {"decoder_embed_dim", embed_dim},
            {"decoder_value_embed_dim", value_embed_dim},
            {"decoder_retention_heads", heads},
            {"decoder_ffn_embed_dim", ffn_dim},
            {"decoder_layers", layers},
            {"activation_fn", activation == Activation::kGelu ? "gelu" : "swish"},
            {"norm_type", norm == NormKind::kRMSNorm ? "rmsnorm" : "layernorm"},
            {"layernorm_eps", eps},
            {"no_scale_embedding", !scale_embedding},
            {"layernorm_embedding", layernorm_embedding},
            {"tie_word_embeddings", tie_embeddings},
            {"use_glu", use_glu},
            {"subln", subln},
            {"recurrent_chunk_size", chunk_size}};
  }
};

}  // namespace retnet
