// Reading config.json into a ModelConfig, by the keys, defaults and refusals of its family's
// table (model/family.hpp). The file is untrusted: it is read as a bounded regular file and
// parsed by parse_json, and every field through JsonObject, so that each error is one line
// naming the file and the key ("config.json: key "decoder_layers" must be an integer, found
// "2""); settings the library does not implement are refused by name. ModelConfig::validate
// then checks the sizes against each other.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/core/json.hpp"
#include "retnet/model/config.hpp"
#include "retnet/model/family.hpp"

namespace retnet {

/// Largest config.json read (real ones are a few KB); checked before the file is read.
constexpr uint64_t kMaxConfigBytes = 16ull << 20;

namespace detail {

/// The family whose identity keys `config` has (a port before its original, by its markers);
/// torchscale when none has them. Throws FormatError when it has the keys of two families.
inline const FamilyTable& config_family(const nlohmann::json& config, const std::string& source) {
  const auto has_all = [&](const std::vector<const char*>& keys) {
    for (const char* key : keys)
      if (!config.contains(key)) return false;
    return !keys.empty();
  };
  const auto has_any = [&](const std::vector<const char*>& keys) {
    for (const char* key : keys)
      if (config.contains(key)) return true;
    return false;
  };
  const FamilyTable* found = nullptr;
  for (const FamilyTable* table : family_tables()) {
    const FamilyConfigKeys& k = table->keys;
    if (!has_all(k.identity) || (!k.markers.empty() && !has_any(k.markers))) continue;
    if (found && found->keys.identity != k.identity) {
      const auto describe = [](const FamilyTable& t) {
        std::string keys, families;
        for (const char* key : t.keys.identity)
          keys += (keys.empty() ? "" : " + ") + std::string(key);
        for (const FamilyTable* other : family_tables())
          if (other->keys.identity == t.keys.identity)
            families += (families.empty() ? "" : ", ") + std::string(other->name);
        return keys + " (" + families + ")";
      };
      throw FormatError(source + ": mixes checkpoint families: has " + describe(*found) + " and " +
                        describe(*table) + "; expected one family's keys");
    }
    if (!found) found = table;
  }
  return found ? *found : kTorchscaleFamily;
}

/// Refuses by name the settings of `table` the library does not implement (those that depend on
/// the FFN once `config` has been read).
inline void refuse_settings(const JsonObject& json, const FamilyTable& table,
                            const ModelConfig* config) {
  for (const FamilyRefusal& r : table.refusals) {
    if (r.plain_ffn_with_subln_only != (config != nullptr)) continue;
    if (config && (config->use_glu || !config->subln)) continue;
    const bool refused = r.when == FamilyRefusal::When::kSet    ? json.has(r.key)
                         : r.when == FamilyRefusal::When::kTrue ? json.boolean(r.key, false)
                                                                : !json.boolean(r.key, true);
    if (refused)
      throw JsonFieldError(r.key, json.label() + ": " + table.name + " checkpoints with " + r.what +
                                      " are not supported");
  }
}

/// The activation named by the table's key; a family that has only one refuses the others.
inline Activation read_activation(const JsonObject& json, const FamilyTable& table) {
  const FamilyConfigKeys& k = table.keys;
  const auto parse = [](const std::string& name) -> std::optional<Activation> {
    if (name == "gelu") return Activation::kGelu;
    if (name == "swish" || name == "silu") return Activation::kSwish;
    return std::nullopt;
  };
  const std::string name = json.string(k.activation, k.activation_default);
  const std::optional<Activation> activation = parse(name);
  const Activation fixed = *parse(k.activation_default);
  if (k.activation_fixed && activation != fixed)
    throw JsonFieldError(k.activation, json.label() + ": " + table.name + " checkpoints with " +
                                           k.activation + " " + excerpt(name) + " (only " +
                                           (fixed == Activation::kGelu ? "gelu" : "swish or silu") +
                                           ") are not supported");
  if (!activation) json.fail(k.activation, "must be gelu, swish or silu, found " + excerpt(name));
  return *activation;
}

/// A dim computed in double from d and a ratio (Python's int(...): truncation towards zero),
/// as an integer. With d valid, a dim outside [1, kMaxDim] is refused naming the ratio's key
/// and the dim ("expand_k = 0.01 gives key dim int(hidden_size * expand_k) = 0"), where a key
/// dim of 0 would otherwise read as "the default, d". With d itself invalid, which
/// ModelConfig::validate reports, the value is only brought into int64's range first (a double
/// beyond it has no integer value: converting one is undefined behaviour).
inline int64_t dim_from_ratio(const JsonObject& json, const ModelConfig& c, double dim,
                              const char* ratio_key, double ratio, const std::string& what) {
  constexpr double kMax = double(ModelConfig::kMaxDim), kLimit = 0x1p62;
  if (c.embed_dim > 0 && c.embed_dim <= ModelConfig::kMaxDim && !(dim >= 1 && dim <= kMax))
    json.fail(ratio_key, "= " + nlohmann::json(ratio).dump() + " gives " + what + " = " +
                             nlohmann::json(dim).dump() + ", outside [1, " +
                             std::to_string(ModelConfig::kMaxDim) + "]");
  return static_cast<int64_t>(std::clamp(dim, -kLimit, kLimit));
}

/// The sizes: d, H, L, the value and key dims, the kv heads and F.
inline void read_sizes(const JsonObject& json, const FamilyConfigKeys& k, ModelConfig& c) {
  const auto size = [&](const char* key, int64_t fallback) {
    return fallback > 0 ? json.optional_integer(key).value_or(fallback) : json.integer(key);
  };
  c.vocab_size = size(k.vocab_size, k.vocab_size_default);
  c.embed_dim = json.integer(k.embed_dim);
  if (k.value_dim) c.value_embed_dim = json.integer(k.value_dim);
  c.heads = json.integer(k.heads);
  const std::string d_key = k.embed_dim;
  const auto times = [&](const char* ratio_key, double fallback, const char* what) {
    const double ratio = json.optional_number(ratio_key).value_or(fallback);
    return dim_from_ratio(json, c, std::trunc(double(c.embed_dim) * ratio), ratio_key, ratio,
                          std::string(what) + " int(" + d_key + " * " + ratio_key + ")");
  };
  if (k.value_ratio) c.value_embed_dim = times(k.value_ratio, k.value_ratio_default, "value dim");
  if (k.key_ratio) c.key_embed_dim = times(k.key_ratio, k.key_ratio_default, "key dim");
  if (k.kv_heads) {
    c.kv_heads = json.optional_integer(k.kv_heads).value_or(0);
    if (json.has(k.kv_heads) && c.kv_heads <= 0)
      json.fail(k.kv_heads, "must be > 0, found " + std::to_string(c.kv_heads));
  }
  if (!k.ffn_ratio || json.has(k.ffn_dim)) {
    c.ffn_dim = json.integer(k.ffn_dim);
  } else {  // a multiple of 256 near d · ratio · 2/3 (fla's GatedMLP)
    const double ratio = !json.value().contains(k.ffn_ratio)
                             ? k.ffn_ratio_default
                             : json.optional_number(k.ffn_ratio).value_or(k.ffn_ratio_null);
    const double near = std::trunc(double(c.embed_dim) * ratio * 2.0 / 3.0);
    const double rounded = 256.0 * std::ceil(near / 256.0);
    c.ffn_dim = dim_from_ratio(json, c, rounded, k.ffn_ratio, ratio,
                               std::string(k.ffn_dim) + " 256 * ceil(int(" + d_key + " * " +
                                   k.ffn_ratio + " * 2/3) / 256)");
  }
  c.layers = size(k.layers, k.layers_default);
}

/// Everything else the table names: activation, norm, eps and the switches.
inline void read_settings(const JsonObject& json, const FamilyTable& table, ModelConfig& c) {
  const FamilyConfigKeys& k = table.keys;
  c.activation = read_activation(json, table);
  c.norm = NormKind::kRMSNorm;
  if (k.norm_type) {
    const std::string norm = json.string(k.norm_type, "rmsnorm");
    if (norm == "layernorm")
      c.norm = NormKind::kLayerNorm;
    else if (norm != "rmsnorm")
      json.fail(k.norm_type, "must be rmsnorm or layernorm, found " + excerpt(norm));
  }
  c.eps = k.eps_fallback ? json.optional_number(k.eps).value_or(
                               json.optional_number(k.eps_fallback).value_or(k.eps_default))
                         : json.optional_number(k.eps).value_or(k.eps_default);
  const auto flag = [&](const char* key, bool fallback, bool absent) {
    return key ? json.boolean(key, fallback) : absent;
  };
  c.scale_embedding = !flag(k.no_scale_embedding, true, true);
  c.layernorm_embedding = flag(k.layernorm_embedding, false, false);
  c.tie_embeddings = flag(k.tie_embeddings, false, false);
  c.use_glu = flag(k.use_glu, true, true);
  c.subln = flag(k.subln, false, false);
  c.lm_decay = flag(k.lm_decay, false, false);
  c.head_norm_weight = flag(k.head_norm_weight, k.head_norm_weight_default, false);
  c.output_gate = flag(k.output_gate, true, true);
  c.fused_norm_gate = flag(k.fused_norm_gate, true, true);
}

/// The weight type of a converted folder's "quantization_config" (docs/FORMATS.md, "Quantised
/// weights"); another quant_method (GPTQ, bitsandbytes, ...) is refused by name.
inline WeightType read_quantization(const JsonObject& config) {
  const JsonObject q = config.object("quantization_config");
  const std::string method = q.string("quant_method");
  if (method != "retnet")
    q.fail("quant_method", "must be retnet (only retnet's own q8 and q4, from `retnet convert`, " +
                               std::string("are supported), found ") + excerpt(method));
  const std::string type = q.string("weights");
  if (type != "q8" && type != "q4") q.fail("weights", "must be q8 or q4, found " + excerpt(type));
  const nlohmann::json& block = q.require("block_size");
  if (block != kQuantBlock)
    q.fail("block_size",
           "must be " + std::to_string(kQuantBlock) + ", found " + json_excerpt(block));
  return parse_weight_type(type);
}

}  // namespace detail

/// The ModelConfig of a parsed config.json, read by its family's table and validated. `source`
/// names the file in every error.
inline ModelConfig read_config_json(const nlohmann::json& config,
                                    const std::string& source = "config.json") {
  if (!config.is_object())
    throw FormatError(source + ": expected a JSON object, found " + JsonObject::kind(config));
  const FamilyTable& table = detail::config_family(config, source);
  const JsonObject json(config, source);
  ModelConfig c;
  c.family = table.family;
  detail::refuse_settings(json, table, nullptr);
  detail::read_sizes(json, table.keys, c);
  detail::read_settings(json, table, c);
  detail::refuse_settings(json, table, &c);
  c.tie_embeddings = json.boolean("tie_word_embeddings", false) || c.tie_embeddings;
  c.chunk_size = json.optional_integer("recurrent_chunk_size").value_or(c.chunk_size);
  if (json.has("quantization_config")) c.weights = detail::read_quantization(json);
  c.validate();
  return c;
}

/// Reads `path`, a regular file of at most kMaxConfigBytes holding one JSON object of bounded
/// depth without duplicate keys (see parse_json), with read_config_json.
inline ModelConfig load_config_json(const std::string& path) {
  return read_config_json(parse_json(read_regular_file(path, kMaxConfigBytes, "config"), path),
                          path);
}

}  // namespace retnet
