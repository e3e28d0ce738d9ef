// The checkpoint families (docs/FORMATS.md#published-checkpoint-families), one table each: the
// config.json key of every setting and its default, the settings refused by name, the tensor
// names and how a checkpoint prefixes them. Everything that reads or writes a family's files
// takes its names from here: io/config_json.hpp (config.json), ModelConfig::to_json and
// validate (model/config.hpp), ModelWeights::visit (model/weights.hpp), io/checkpoint.hpp and
// io/load.hpp (tensor prefixes, family checks), io/save.hpp (the prefix written).
//
// A new family is a new table here (and in family_tables()), plus its differences in the math
// in RetNetModel::layer_params; io/config_json.hpp grows only for a kind of key no table has.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace retnet {

/// Which published code a checkpoint comes from.
enum class Family {
  kTorchscale,  // microsoft/torchscale (names without prefix or under "decoder.")
  kSyncdoth,    // syncdoth/RetNet, the Hugging Face port of torchscale (names under "model.")
  kFla,         // flash-linear-attention's RetNetForCausalLM
};

/// A config.json setting the library does not implement, refused by name in one line:
/// "FILE: FAMILY checkpoints with WHAT are not supported".
struct FamilyRefusal {
  enum class When { kSet, kTrue, kFalse };  // the key is present and not null / true / false
  const char* key;
  When when;
  const char* what;                        // the setting, as the message names it
  bool plain_ffn_with_subln_only = false;  // refused only for a plain FFN with subln
};

/// The config.json key of each ModelConfig field in one family (nullptr: the family has no such
/// key) and the value an absent key gives. Sizes without a default are required.
struct FamilyConfigKeys {
  const char* vocab_size = "vocab_size";
  int64_t vocab_size_default = 0;     // 0: required
  const char* embed_dim = nullptr;    // d
  const char* heads = nullptr;        // H
  const char* layers = nullptr;       // L
  int64_t layers_default = 0;         // 0: required
  const char* value_dim = nullptr;    // H·dv as an integer key, or
  const char* value_ratio = nullptr;  // H·dv = int(d · ratio)
  double value_ratio_default = 0;
  const char* key_ratio = nullptr;  // H·dk = int(d · ratio); no key: H·dk = d
  double key_ratio_default = 0;
  const char* kv_heads = nullptr;    // grouped heads; no key: every head has its keys
  const char* ffn_dim = nullptr;     // F; required unless ffn_ratio is a key
  const char* ffn_ratio = nullptr;   // F from d · ratio when ffn_dim is absent
  double ffn_ratio_default = 0;      // when ffn_ratio is absent
  double ffn_ratio_null = 0;         // when ffn_ratio is an explicit null
  const char* activation = nullptr;  // gelu | swish | silu
  const char* activation_default = "gelu";
  bool activation_fixed = false;       // the family has only activation_default (to_json writes it)
  const char* norm_type = nullptr;     // rmsnorm | layernorm; no key: RMSNorm
  const char* eps = nullptr;           // the norms' epsilon
  const char* eps_fallback = nullptr;  // read when `eps` is absent
  double eps_default = 1e-6;
  const char* no_scale_embedding = nullptr;  // scale_embedding = !value; absent: no scaling
  const char* layernorm_embedding = nullptr;
  const char* tie_embeddings = nullptr;  // besides tie_word_embeddings, which every family reads
  const char* use_glu = nullptr;
  const char* subln = nullptr;
  const char* lm_decay = nullptr;
  const char* head_norm_weight = nullptr;  // the per-head norm has a weight
  bool head_norm_weight_default = false;
  const char* output_gate = nullptr;      // no key: the gate is always there
  const char* fused_norm_gate = nullptr;  // the head norm's weight is named head_norm_fused
  // Written by ModelConfig::to_json beside the settings (key, string value); the reader
  // ignores them.
  std::vector<std::pair<const char*, const char*>> constants;
  // How a config.json shows its family: it has every `identity` key (families sharing them,
  // as a port shares its original's, are told apart by `markers`: keys only the port writes).
  std::vector<const char*> identity;
  std::vector<const char*> markers;
};

/// Tensor names of one family, without the checkpoint's prefix, in checkpoint order (the order
/// ModelWeights::visit walks and model_fingerprint hashes). Norms are named without ".weight" /
/// ".bias"; nullptr: the family has no such tensor.
struct FamilyTensorNames {
  const char* embed = nullptr;
  const char* embed_norm = nullptr;
  // Per layer, after "layers.{i}.":
  const char* retention_norm = nullptr;
  const char* q_proj = nullptr;
  const char* k_proj = nullptr;
  const char* v_proj = nullptr;
  const char* g_proj = nullptr;
  const char* head_norm = nullptr;        // the per-head norm's weight
  const char* head_norm_fused = nullptr;  // the same, fused with the gate (fuse_norm)
  const char* out_proj = nullptr;
  const char* ffn_norm = nullptr;
  const char* fc1 = nullptr;  // also the fused [2F, d] gate and up projection, where fused
  const char* gate = nullptr;
  const char* fc1_bias = nullptr;  // plain FFN only
  const char* fc2_bias = nullptr;
  const char* sub_norm = nullptr;  // plain FFN with subln: a LayerNorm after the activation
  const char* fc2 = nullptr;
  // After the layers:
  const char* final_norm = nullptr;
  const char* output = nullptr;
};

/// Tensors of a layout the library does not load, refused by name in one line: "FILE: tensor
/// NAME is FAMILY's WHAT: not supported". A name is refused when it contains `contains` and,
/// unless `and_any` is empty, one of `and_any`.
struct TensorRefusal {
  const char* contains;
  std::vector<const char*> and_any;
  const char* what;
};

/// Everything the library knows of one family's files.
struct FamilyTable {
  Family family = Family::kTorchscale;
  const char* name = nullptr;
  FamilyConfigKeys keys;
  std::vector<FamilyRefusal> refusals;
  FamilyTensorNames tensors;
  std::vector<TensorRefusal> tensor_refusals;
  // How a checkpoint stores the tensors: the prefixes it may put before every name (the first
  // is the one save_model writes), except names that start with `unprefixed_stem` (fla stores
  // lm_head.weight beside "model."). The output projection may also be stored under one of
  // `output_aliases`, without prefix.
  std::vector<const char*> prefixes;
  const char* unprefixed_stem = nullptr;
  std::vector<const char*> output_aliases;
  bool rms_norm_only = false;  // every norm is an RMSNorm (no norm_type, no biases)
  // fla's switches: an optional output gate, a weight on the head norm, a fused gate and up
  // projection (ModelWeights::visit and RetNetModel::layer_params ignore them elsewhere).
  bool fla_switches = false;
};

namespace detail {

// torchscale's RetNetConfig (docs/NUMERICS.md#config-keys) and its tensor names
// (docs/NUMERICS.md#tensor-names); syncdoth's port keeps both and adds use_lm_decay.
inline FamilyTable torchscale_like_table(Family family, const char* name) {
  FamilyTable t;
  t.family = family;
  t.name = name;
  FamilyConfigKeys& k = t.keys;
  k.embed_dim = "decoder_embed_dim";
  k.heads = "decoder_retention_heads";
  k.layers = "decoder_layers";
  k.value_dim = "decoder_value_embed_dim";
  k.ffn_dim = "decoder_ffn_embed_dim";
  k.activation = "activation_fn";
  k.activation_default = "gelu";
  k.norm_type = "norm_type";
  k.eps = "layernorm_eps";
  k.eps_default = 1e-6;
  k.no_scale_embedding = "no_scale_embedding";
  k.layernorm_embedding = "layernorm_embedding";
  k.tie_embeddings = "share_decoder_input_output_embed";
  k.use_glu = "use_glu";
  k.subln = "subln";
  k.lm_decay = "use_lm_decay";
  k.identity = {"decoder_embed_dim"};
  t.refusals = {
      {"deepnorm", FamilyRefusal::When::kTrue, "deepnorm: true"},
      {"decoder_normalize_before", FamilyRefusal::When::kFalse,
       "decoder_normalize_before: false (post-norm)"},
      {"tensor_parallel", FamilyRefusal::When::kTrue,
       "tensor_parallel: true (retention.decay_proj)"},
      {"use_ffn_rms_norm", FamilyRefusal::When::kTrue,
       "use_ffn_rms_norm: true (an RMSNorm sub-norm in the plain FFN)", true},
  };
  FamilyTensorNames& n = t.tensors;
  n.embed = "embed_tokens.weight";
  n.embed_norm = "layernorm_embedding";
  n.retention_norm = "retention_layer_norm";
  n.q_proj = "retention.q_proj.weight";
  n.k_proj = "retention.k_proj.weight";
  n.v_proj = "retention.v_proj.weight";
  n.g_proj = "retention.g_proj.weight";
  n.out_proj = "retention.out_proj.weight";
  n.ffn_norm = "final_layer_norm";
  n.fc1 = "ffn.fc1.weight";
  n.gate = "ffn.gate.weight";
  n.fc1_bias = "ffn.fc1.bias";
  n.fc2_bias = "ffn.fc2.bias";
  n.sub_norm = "ffn.ffn_layernorm";
  n.fc2 = "ffn.fc2.weight";
  n.final_norm = "layer_norm";
  n.output = "output_projection.weight";
  t.output_aliases = {"output_projection.weight", "lm_head.weight"};  // HF: lm_head
  return t;
}

inline FamilyTable torchscale_table() {
  FamilyTable t = torchscale_like_table(Family::kTorchscale, "torchscale");
  t.prefixes = {"", "decoder."};  // fairseq's files put every name under "decoder."
  return t;
}

inline FamilyTable syncdoth_table() {
  FamilyTable t = torchscale_like_table(Family::kSyncdoth, "syncdoth");
  t.prefixes = {"model."};
  t.tensor_refusals = {
      {"blocks.",
       {".msr.", ".ln1."},
       "layout of September 2023 or earlier (blocks.{i}.msr, ln1/ln2), a different model"},
      {"decay_proj", {}, "tensor-parallel decay_proj"},
  };
  t.keys.constants = {{"forward_impl", "parallel"}};
  // Keys only syncdoth's RetNetConfig (a transformers PretrainedConfig) writes.
  t.keys.markers = {"forward_impl", "output_retentions", "z_loss_coeff", "architectures"};
  return t;
}

// flash-linear-attention's RetNetConfig and RetNetForCausalLM
// (docs/FORMATS.md#fla-flash-linear-attention-retnetforcausallm).
inline FamilyTable fla_table() {
  FamilyTable t;
  t.family = Family::kFla;
  t.name = "fla";
  FamilyConfigKeys& k = t.keys;
  k.vocab_size_default = 32000;
  k.embed_dim = "hidden_size";
  k.heads = "num_heads";
  k.layers = "num_hidden_layers";
  k.layers_default = 24;
  k.value_ratio = "expand_v";
  k.value_ratio_default = 2.0;
  k.key_ratio = "expand_k";
  k.key_ratio_default = 1.0;
  k.kv_heads = "num_kv_heads";
  k.ffn_dim = "intermediate_size";
  k.ffn_ratio = "hidden_ratio";  // GatedMLP: a multiple of 256 near d · ratio · 2/3
  k.ffn_ratio_default = 2.0;     // RetNetConfig's default
  k.ffn_ratio_null = 4.0;        // an explicit null reaches GatedMLP, which takes 4
  k.activation = "hidden_act";   // swish or silu only: refused otherwise
  k.activation_default = "swish";
  k.activation_fixed = true;
  k.eps = "norm_eps";
  k.eps_fallback = "rms_norm_eps";  // older configs (many carry both, with the same value)
  k.eps_default = 1e-6;
  k.head_norm_weight = "elementwise_affine";
  k.head_norm_weight_default = true;
  k.output_gate = "use_output_gate";
  k.fused_norm_gate = "fuse_norm";
  k.constants = {{"model_type", "retnet"}};
  k.identity = {"hidden_size", "num_heads"};
  t.refusals = {
      {"feature_map", FamilyRefusal::When::kSet, "feature_map set (only null)"},
      {"use_short_conv", FamilyRefusal::When::kTrue, "use_short_conv: true"},
      {"attn", FamilyRefusal::When::kSet, "hybrid attention layers (attn is set)"},
      {"attnres_block_size", FamilyRefusal::When::kSet, "attnres_block_size set"},
  };
  FamilyTensorNames& n = t.tensors;
  n.embed = "embeddings.weight";
  n.retention_norm = "attn_norm";
  n.q_proj = "attn.q_proj.weight";
  n.k_proj = "attn.k_proj.weight";
  n.v_proj = "attn.v_proj.weight";
  n.g_proj = "attn.g_proj.weight";
  n.head_norm = "attn.g_norm.weight";
  n.head_norm_fused = "attn.g_norm_swish_gate.weight";
  n.out_proj = "attn.o_proj.weight";
  n.ffn_norm = "mlp_norm";
  n.fc1 = "mlp.gate_proj.weight";
  n.gate = "mlp.up_proj.weight";
  n.fc2 = "mlp.down_proj.weight";
  n.final_norm = "norm";
  n.output = "lm_head.weight";
  t.prefixes = {"model."};
  t.unprefixed_stem = "lm_head.";
  t.rms_norm_only = true;
  t.fla_switches = true;
  return t;
}

}  // namespace detail

inline const FamilyTable kTorchscaleFamily = detail::torchscale_table();
inline const FamilyTable kSyncdothFamily = detail::syncdoth_table();
inline const FamilyTable kFlaFamily = detail::fla_table();

/// Every family; a port (syncdoth) before the family whose identity keys it shares.
inline std::vector<const FamilyTable*> family_tables() {
  return {&kSyncdothFamily, &kTorchscaleFamily, &kFlaFamily};
}

/// The table of `family`.
inline const FamilyTable& family_table(Family family) {
  switch (family) {
    case Family::kSyncdoth:
      return kSyncdothFamily;
    case Family::kFla:
      return kFlaFamily;
    case Family::kTorchscale:
      break;
  }
  return kTorchscaleFamily;
}

inline const char* family_name(Family family) {
  return family_table(family).name;
}

}  // namespace retnet
