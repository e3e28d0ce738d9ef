// Model hyper-parameters, read from the `config.json` of one of three checkpoint families
// (docs/FORMATS.md#published-checkpoint-families):
//   torchscale  decoder_embed_dim, ...: docs/NUMERICS.md#config-keys (torchscale's RetNetConfig
//               defaults, except the two that table names);
//   syncdoth    the same keys (its Hugging Face port of torchscale), plus use_lm_decay;
//   fla         hidden_size, num_heads, ...: flash-linear-attention's RetNetConfig.
// The family is read from the keys (and, when a checkpoint is loaded, confirmed by the tensor
// names: io/load.hpp). Settings the library does not implement are refused by name.
#pragma once

#include <cmath>
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
#include "retnet/ops/weight_type.hpp"

namespace retnet {

/// Which published code a checkpoint comes from (docs/FORMATS.md#published-checkpoint-families).
enum class Family {
  kTorchscale,  // microsoft/torchscale (names without prefix or under "decoder.")
  kSyncdoth,    // syncdoth/RetNet, the Hugging Face port of torchscale (names under "model.")
  kFla,         // flash-linear-attention's RetNetForCausalLM
};

inline const char* family_name(Family f) {
  return f == Family::kFla ? "fla" : f == Family::kSyncdoth ? "syncdoth" : "torchscale";
}

struct ModelConfig {
  Family family = Family::kTorchscale;
  int64_t vocab_size = 0;
  int64_t embed_dim = 0;        // d: decoder_embed_dim | hidden_size
  int64_t value_embed_dim = 0;  // Dv = H·dv: decoder_value_embed_dim | int(d · expand_v)
  int64_t heads = 0;            // H: decoder_retention_heads | num_heads
  int64_t ffn_dim = 0;          // F: decoder_ffn_embed_dim | intermediate_size (or its formula)
  int64_t layers = 0;           // L: decoder_layers | num_hidden_layers
  int64_t key_embed_dim = 0;    // H·dk: int(d · expand_k) (fla); 0 means d
  int64_t kv_heads = 0;         // Hkv: num_kv_heads (fla, grouped heads); 0 means H
  Activation activation = Activation::kGelu;
  NormKind norm = NormKind::kRMSNorm;
  double eps = 1e-6;                 // layernorm_eps | norm_eps (or rms_norm_eps)
  bool scale_embedding = false;      // !no_scale_embedding
  bool layernorm_embedding = false;  // RMSNorm (or LayerNorm) after the embedding
  bool tie_embeddings = false;       // share_decoder_input_output_embed | tie_word_embeddings
  bool use_glu = true;               // GLU FFN (torchscale); false: plain FFN with biases
  bool subln = false;                // plain FFN only: LayerNorm after the activation
  bool lm_decay = false;             // use_lm_decay: gamma_h = 1 - 2^(-5 - 4h/(H-1))
  bool head_norm_weight = false;     // fla elementwise_affine: the per-head norm has a weight
  bool output_gate = true;           // fla use_output_gate (torchscale always has the gate)
  bool fused_norm_gate = true;       // fla fuse_norm: names the head norm g_norm_swish_gate
  bool fused_gate_up = false;        // fla files before 2025: mlp.gate_proj is [2F, d] (no
                                     // up_proj); not a config key, read from the tensor names
  int64_t chunk_size = 64;           // recurrent_chunk_size: default chunk of the chunkwise form
  WeightType weights = WeightType::kF32;  // the linear maps' type: quantization_config (q8, q4)
                                          // in a converted folder; bf16 from the tensors' dtype

  int64_t key_dim() const { return key_embed_dim > 0 ? key_embed_dim : embed_dim; }
  int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t key_head_dim() const { return key_dim() / heads; }
  int64_t value_head_dim() const { return value_embed_dim / heads; }

  /// Throws FormatError naming the first inconsistent field (by the family's key names).
  void validate() const {
    const bool fla = family == Family::kFla;
    auto positive = [](int64_t v, const char* key) {
      if (v <= 0)
        throw FormatError(std::string("config: ") + key + " must be > 0, found " +
                          std::to_string(v));
    };
    const char* d_key = fla ? "hidden_size" : "decoder_embed_dim";
    const char* dv_key = fla ? "value dim int(hidden_size * expand_v)" : "decoder_value_embed_dim";
    const char* h_key = fla ? "num_heads" : "decoder_retention_heads";
    positive(vocab_size, "vocab_size");
    positive(embed_dim, d_key);
    positive(value_embed_dim, dv_key);
    positive(heads, h_key);
    positive(ffn_dim, fla ? "intermediate_size" : "decoder_ffn_embed_dim");
    positive(layers, fla ? "num_hidden_layers" : "decoder_layers");
    positive(chunk_size, "recurrent_chunk_size");
    // Bounds far above any published model, so that products of sizes stay exact in int64.
    const auto at_most = [](int64_t v, int64_t limit, const char* key) {
      if (v > limit)
        throw FormatError(std::string("config: ") + key + " = " + std::to_string(v) +
                          " is above the supported " + std::to_string(limit));
    };
    at_most(vocab_size, int64_t(1) << 31, "vocab_size");
    for (const auto& [v, key] : {std::pair<int64_t, const char*>{embed_dim, d_key},
                                 {value_embed_dim, dv_key},
                                 {key_embed_dim, "key dim"},
                                 {ffn_dim, fla ? "intermediate_size" : "decoder_ffn_embed_dim"}})
      at_most(v, int64_t(1) << 20, key);
    at_most(heads, 4096, h_key);
    at_most(kv_heads, 4096, "num_kv_heads");
    at_most(layers, 4096, fla ? "num_hidden_layers" : "decoder_layers");
    if (key_embed_dim < 0 || kv_heads < 0)
      throw FormatError("config: key dim and num_kv_heads must be > 0");
    const std::string k_key = fla ? "key dim int(hidden_size * expand_k)" : d_key;
    if (key_dim() % heads != 0)
      throw FormatError("config: " + k_key + " " + std::to_string(key_dim()) +
                        " is not divisible by " + h_key + " " + std::to_string(heads));
    if (value_embed_dim % heads != 0)
      throw FormatError(std::string("config: ") + dv_key + " " + std::to_string(value_embed_dim) +
                        " is not divisible by " + h_key + " " + std::to_string(heads));
    if (heads % key_value_heads() != 0)
      throw FormatError("config: num_heads " + std::to_string(heads) +
                        " is not a multiple of num_kv_heads " + std::to_string(key_value_heads()));
    if (key_head_dim() % 2 != 0)
      throw FormatError("config: key head size " + k_key + " / " + h_key + " = " +
                        std::to_string(key_head_dim()) + " must be even (rotation works on pairs)");
    if (!(eps > 0)) throw FormatError(std::string("config: ") + eps_key() + " must be > 0");
  }

  const char* eps_key() const { return family == Family::kFla ? "norm_eps" : "layernorm_eps"; }

  /// The family its keys say (torchscale or syncdoth for decoder_embed_dim, fla for hidden_size
  /// and num_heads); throws FormatError when a config has the keys of both.
  static Family detect_family(const nlohmann::json& j, const std::string& source) {
    const bool torchscale_keys = j.contains("decoder_embed_dim");
    const bool fla_keys = j.contains("hidden_size") && j.contains("num_heads");
    if (torchscale_keys && fla_keys)
      throw FormatError(source +
                        ": mixes checkpoint families: has decoder_embed_dim (torchscale, "
                        "syncdoth) and hidden_size + num_heads (fla); expected one family's keys");
    if (fla_keys) return Family::kFla;
    // Keys only syncdoth's RetNetConfig (a transformers PretrainedConfig) writes.
    for (const char* key : {"forward_impl", "output_retentions", "z_loss_coeff", "architectures"})
      if (j.contains(key)) return Family::kSyncdoth;
    return Family::kTorchscale;
  }

  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "config.json") {
    if (!j.is_object()) throw FormatError(source + ": expected a JSON object");
    ModelConfig c;
    c.family = detect_family(j, source);
    Reader r{j, source};
    if (c.family == Family::kFla)
      c.read_fla(r);
    else
      c.read_torchscale(r);
    c.tie_embeddings = r.flag("tie_word_embeddings", false) || c.tie_embeddings;
    if (j.contains("recurrent_chunk_size") && !j["recurrent_chunk_size"].is_null())
      c.chunk_size = r.required("recurrent_chunk_size");
    if (r.has("quantization_config"))
      c.weights = read_quantization(j["quantization_config"], source);
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

  /// A config.json of the config's family that from_json reads back to the same values
  /// (fused_gate_up, which comes from the tensor names, excepted).
  nlohmann::json to_json() const {
    nlohmann::json j = family_json();
    if (is_block_quantised(weights))  // bf16 needs no key: the tensors' dtype says it
      j["quantization_config"] = {{"quant_method", "retnet"},
                                  {"weights", weight_type_name(weights)},
                                  {"block_size", kQuantBlock}};
    return j;
  }

 private:
  /// The weight type of a converted folder's "quantization_config" (docs/FORMATS.md, "Quantised
  /// weights"); another quant_method (GPTQ, bitsandbytes, ...) is refused by name.
  static WeightType read_quantization(const nlohmann::json& q, const std::string& source) {
    const std::string where = source + ": quantization_config";
    if (!q.is_object()) throw FormatError(where + " must be an object, found " + json_excerpt(q));
    const auto text = [&](const char* key) {
      if (!q.contains(key) || !q[key].is_string())
        throw FormatError(where + ": \"" + key + "\" must be a string");
      return q[key].get<std::string>();
    };
    const std::string method = text("quant_method");
    if (method != "retnet")
      throw FormatError(where + ": quant_method " + excerpt(method) +
                        " is not supported (only retnet's own q8 and q4, from `retnet convert`)");
    const std::string type = text("weights");
    if (type != "q8" && type != "q4")
      throw FormatError(where + ": weights " + excerpt(type) + ", expected q8 or q4");
    if (!q.contains("block_size") || q["block_size"] != kQuantBlock)
      throw FormatError(where + ": block_size must be " + std::to_string(kQuantBlock));
    return parse_weight_type(type);
  }

  nlohmann::json family_json() const {
    if (family == Family::kFla) {
      return {{"model_type", "retnet"},
              {"vocab_size", vocab_size},
              {"hidden_size", embed_dim},
              {"num_heads", heads},
              {"num_kv_heads", kv_heads > 0 ? nlohmann::json(kv_heads) : nlohmann::json()},
              {"expand_k", double(key_dim()) / double(embed_dim)},
              {"expand_v", double(value_embed_dim) / double(embed_dim)},
              {"intermediate_size", ffn_dim},
              {"num_hidden_layers", layers},
              {"hidden_act", "swish"},
              {"norm_eps", eps},
              {"elementwise_affine", head_norm_weight},
              {"use_output_gate", output_gate},
              {"fuse_norm", fused_norm_gate},
              {"tie_word_embeddings", tie_embeddings},
              {"recurrent_chunk_size", chunk_size}};
    }
    nlohmann::json j = {{"vocab_size", vocab_size},
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
                        {"use_lm_decay", lm_decay},
                        {"recurrent_chunk_size", chunk_size}};
    if (family == Family::kSyncdoth) j["forward_impl"] = "parallel";
    return j;
  }

  /// Typed access to the keys of one config.json; every error names the file and the key.
  struct Reader {
    const nlohmann::json& j;
    const std::string& source;

    bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
    int64_t required(const char* key) const {
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
    }
    int64_t integer(const char* key, int64_t fallback) const {
      return has(key) ? required(key) : fallback;
    }
    double number(const char* key, double fallback) const {
      if (!has(key)) return fallback;
      if (!j[key].is_number()) throw FormatError(source + ": " + key + " must be a number");
      return j[key].get<double>();
    }
    bool flag(const char* key, bool fallback) const {
      if (!has(key)) return fallback;
      if (!j[key].is_boolean())
        throw FormatError(source + ": key \"" + key + "\" must be a boolean");
      return j[key].get<bool>();
    }
    std::string text(const char* key, const std::string& fallback) const {
      if (!has(key)) return fallback;
      if (!j[key].is_string()) throw FormatError(source + ": " + key + " must be a string");
      return j[key].get<std::string>();
    }
    Activation activation(const char* key, const std::string& fallback) const {
      const std::string a = text(key, fallback);
      if (a == "gelu") return Activation::kGelu;
      if (a == "swish" || a == "silu") return Activation::kSwish;
      throw FormatError(source + ": " + key + " " + excerpt(a) + " is not gelu or swish");
    }
    /// A setting the library does not implement: refused by name, in one line.
    [[noreturn]] void unsupported(const std::string& family, const std::string& what) const {
      throw FormatError(source + ": " + family + " checkpoints with " + what +
                        " are not supported");
    }
  };

  void read_torchscale(const Reader& r) {
    const char* who = family == Family::kSyncdoth ? "syncdoth" : "torchscale";
    vocab_size = r.required("vocab_size");
    embed_dim = r.required("decoder_embed_dim");
    value_embed_dim = r.required("decoder_value_embed_dim");
    heads = r.required("decoder_retention_heads");
    ffn_dim = r.required("decoder_ffn_embed_dim");
    layers = r.required("decoder_layers");
    activation = r.activation("activation_fn", "gelu");
    const std::string n = r.text("norm_type", "rmsnorm");
    if (n == "rmsnorm")
      norm = NormKind::kRMSNorm;
    else if (n == "layernorm")
      norm = NormKind::kLayerNorm;
    else
      throw FormatError(r.source + ": norm_type " + excerpt(n) + " is not rmsnorm or layernorm");
    eps = r.number("layernorm_eps", 1e-6);
    scale_embedding = !r.flag("no_scale_embedding", true);
    layernorm_embedding = r.flag("layernorm_embedding", false);
    tie_embeddings = r.flag("share_decoder_input_output_embed", false);
    use_glu = r.flag("use_glu", true);
    subln = r.flag("subln", false);
    lm_decay = r.flag("use_lm_decay", false);
    if (r.flag("deepnorm", false)) r.unsupported(who, "deepnorm: true");
    if (!r.flag("decoder_normalize_before", true))
      r.unsupported(who, "decoder_normalize_before: false (post-norm)");
    if (r.flag("tensor_parallel", false))
      r.unsupported(who, "tensor_parallel: true (retention.decay_proj)");
    if (!use_glu && subln && r.flag("use_ffn_rms_norm", false))
      r.unsupported(who, "use_ffn_rms_norm: true (an RMSNorm sub-norm in the plain FFN)");
  }

  void read_fla(const Reader& r) {
    if (r.has("feature_map"))
      r.unsupported("fla", "feature_map " + r.j["feature_map"].dump() + " (only null)");
    if (r.flag("use_short_conv", false)) r.unsupported("fla", "use_short_conv: true");
    if (r.has("attn")) r.unsupported("fla", "hybrid attention layers (attn is set)");
    if (r.has("attnres_block_size")) r.unsupported("fla", "attnres_block_size set");
    const std::string act = r.text("hidden_act", "swish");
    if (act != "swish" && act != "silu")
      r.unsupported("fla", "hidden_act \"" + act + "\" (only swish or silu)");
    activation = Activation::kSwish;
    norm = NormKind::kRMSNorm;
    vocab_size = r.integer("vocab_size", 32000);
    embed_dim = r.required("hidden_size");
    heads = r.required("num_heads");
    layers = r.integer("num_hidden_layers", 24);
    kv_heads = r.integer("num_kv_heads", 0);
    if (r.has("num_kv_heads") && kv_heads <= 0)
      throw FormatError(r.source + ": num_kv_heads must be > 0, found " + std::to_string(kv_heads));
    // Python's int(d * expand): truncation towards zero of the double product.
    key_embed_dim = static_cast<int64_t>(double(embed_dim) * r.number("expand_k", 1.0));
    value_embed_dim = static_cast<int64_t>(double(embed_dim) * r.number("expand_v", 2.0));
    if (r.has("intermediate_size")) {
      ffn_dim = r.required("intermediate_size");
    } else {  // fla's GatedMLP: a multiple of 256 near d · hidden_ratio · 2/3
      // RetNetConfig's default is 2; an explicit null reaches GatedMLP, which takes 4.
      const double ratio = r.j.contains("hidden_ratio") ? r.number("hidden_ratio", 4.0) : 2.0;
      const auto near = static_cast<int64_t>(double(embed_dim) * ratio * 2.0 / 3.0);
      ffn_dim = 256 * ((near + 255) / 256);
    }
    // norm_eps, or rms_norm_eps in older configs (many carry both, with the same value).
    eps = r.number("norm_eps", r.number("rms_norm_eps", 1e-6));
    head_norm_weight = r.flag("elementwise_affine", true);
    output_gate = r.flag("use_output_gate", true);
    fused_norm_gate = r.flag("fuse_norm", true);
    tie_embeddings = false;  // tie_word_embeddings is read by from_json
    scale_embedding = false, layernorm_embedding = false, use_glu = true, subln = false;
  }
};

}  // namespace retnet
