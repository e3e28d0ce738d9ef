// Model hyper-parameters of one of the checkpoint families (model/family.hpp, one table each;
// docs/FORMATS.md#published-checkpoint-families). config.json is read by io/config_json.hpp,
// which refuses by name the settings the library does not implement; the family is read from
// the keys and, when a checkpoint is loaded, confirmed by the tensor names (io/load.hpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "retnet/core/error.hpp"
#include "retnet/model/family.hpp"
#include "retnet/ops/activation.hpp"
#include "retnet/ops/norm.hpp"
#include "retnet/ops/weight_type.hpp"

namespace retnet {

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
                                          // in a converted folder; f16/bf16: the tensors' dtype

  int64_t key_dim() const { return key_embed_dim > 0 ? key_embed_dim : embed_dim; }
  int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t key_head_dim() const { return key_dim() / heads; }
  int64_t value_head_dim() const { return value_embed_dim / heads; }

  /// The largest d, value, key and FFN dims: far above any published model, so that products of
  /// sizes stay exact in int64.
  static constexpr int64_t kMaxDim = int64_t(1) << 20;

  /// Throws FormatError naming the first inconsistent field (by the family's key names).
  void validate() const {
    const FamilyConfigKeys& k = family_table(family).keys;
    auto positive = [](int64_t v, const std::string& key) {
      if (v <= 0) throw FormatError("config: " + key + " must be > 0, found " + std::to_string(v));
    };
    const std::string d_key = k.embed_dim;
    const std::string dv_key = k.value_dim ? std::string(k.value_dim)
                                           : "value dim int(" + d_key + " * " + k.value_ratio + ")";
    const std::string h_key = k.heads, ffn_key = k.ffn_dim, layers_key = k.layers;
    const std::string kv_key = k.kv_heads ? k.kv_heads : "num_kv_heads";
    positive(vocab_size, k.vocab_size);
    positive(embed_dim, d_key);
    positive(value_embed_dim, dv_key);
    positive(heads, h_key);
    positive(ffn_dim, ffn_key);
    positive(layers, layers_key);
    positive(chunk_size, "recurrent_chunk_size");
    // Bounds far above any published model (kMaxDim for the dims).
    const auto at_most = [](int64_t v, int64_t limit, const std::string& key) {
      if (v > limit)
        throw FormatError("config: " + key + " = " + std::to_string(v) +
                          " is above the supported " + std::to_string(limit));
    };
    at_most(vocab_size, int64_t(1) << 31, k.vocab_size);
    for (const auto& [v, key] : {std::pair<int64_t, std::string>{embed_dim, d_key},
                                 {value_embed_dim, dv_key},
                                 {key_embed_dim, "key dim"},
                                 {ffn_dim, ffn_key}})
      at_most(v, kMaxDim, key);
    at_most(heads, 4096, h_key);
    at_most(kv_heads, 4096, kv_key);
    at_most(layers, 4096, layers_key);
    if (key_embed_dim < 0 || kv_heads < 0)
      throw FormatError("config: key dim and " + kv_key + " must be > 0");
    const std::string k_key =
        k.key_ratio ? "key dim int(" + d_key + " * " + k.key_ratio + ")" : d_key;
    if (key_dim() % heads != 0)
      throw FormatError("config: " + k_key + " " + std::to_string(key_dim()) +
                        " is not divisible by " + h_key + " " + std::to_string(heads));
    if (value_embed_dim % heads != 0)
      throw FormatError("config: " + dv_key + " " + std::to_string(value_embed_dim) +
                        " is not divisible by " + h_key + " " + std::to_string(heads));
    if (heads % key_value_heads() != 0)
      throw FormatError("config: " + h_key + " " + std::to_string(heads) +
                        " is not a multiple of " + kv_key + " " +
                        std::to_string(key_value_heads()));
    if (key_head_dim() % 2 != 0)
      throw FormatError("config: key head size " + k_key + " / " + h_key + " = " +
                        std::to_string(key_head_dim()) + " must be even (rotation works on pairs)");
    if (!(eps > 0)) throw FormatError(std::string("config: ") + k.eps + " must be > 0");
  }

  /// A config.json of the config's family, with its table's keys, that io/config_json.hpp reads
  /// back to the same values (fused_gate_up, which comes from the tensor names, excepted). Also
  /// what model_fingerprint hashes.
  nlohmann::json to_json() const {
    const FamilyConfigKeys& k = family_table(family).keys;
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [key, value] : k.constants) j[key] = value;
    j[k.vocab_size] = vocab_size;
    j[k.embed_dim] = embed_dim;
    j[k.heads] = heads;
    j[k.layers] = layers;
    if (k.value_dim) j[k.value_dim] = value_embed_dim;
    if (k.value_ratio) j[k.value_ratio] = double(value_embed_dim) / double(embed_dim);
    if (k.key_ratio) j[k.key_ratio] = double(key_dim()) / double(embed_dim);
    if (k.kv_heads) j[k.kv_heads] = kv_heads > 0 ? nlohmann::json(kv_heads) : nlohmann::json();
    j[k.ffn_dim] = ffn_dim;
    j[k.activation] = k.activation_fixed                ? k.activation_default
                      : activation == Activation::kGelu ? "gelu"
                                                        : "swish";
    if (k.norm_type) j[k.norm_type] = norm == NormKind::kRMSNorm ? "rmsnorm" : "layernorm";
    j[k.eps] = eps;
    const std::pair<const char*, bool> flags[] = {{k.no_scale_embedding, !scale_embedding},
                                                  {k.layernorm_embedding, layernorm_embedding},
                                                  {"tie_word_embeddings", tie_embeddings},
                                                  {k.use_glu, use_glu},
                                                  {k.subln, subln},
                                                  {k.lm_decay, lm_decay},
                                                  {k.head_norm_weight, head_norm_weight},
                                                  {k.output_gate, output_gate},
                                                  {k.fused_norm_gate, fused_norm_gate}};
    for (const auto& [key, value] : flags)
      if (key) j[key] = value;
    j["recurrent_chunk_size"] = chunk_size;
    if (is_block_quantised(weights))  // f16, bf16 need no key: the tensors' dtype says it
      j["quantization_config"] = {{"quant_method", "retnet"},
                                  {"weights", weight_type_name(weights)},
                                  {"block_size", kQuantBlock}};
    return j;
  }
};

}  // namespace retnet
