// All parameters of a RetNet decoder, with the names and shapes of each checkpoint family (the
// names from its table, model/family.hpp; docs/NUMERICS.md#tensor-names, docs/FORMATS.md).
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "retnet/core/memory.hpp"
#include "retnet/layers/decoder_layer.hpp"
#include "retnet/model/config.hpp"
#include "retnet/model/family.hpp"

namespace retnet {

template <typename T>
struct is_linear_weight : std::false_type {};
template <typename Scalar>
struct is_linear_weight<LinearWeight<Scalar>> : std::true_type {};

/// `Linear` is LinearWeight for inference (panels of any weight type), or a dense Matrix for
/// training and for gradients (DenseModelWeights): the same names, shapes and walk either way.
template <typename Scalar, typename Linear = LinearWeight<Scalar>>
struct ModelWeights {
  // A tied model holds its embedding once, as the output projection. Embedding rows are gathered
  // from the panels (a few per token), so both are LinearWeights of the model's weight type.
  Linear embed;             // [vocab, d]; empty when tied, unless the checkpoint stored both
  Norm<Scalar> embed_norm;  // layernorm_embedding only
  std::vector<DecoderLayerWeights<Scalar, Linear>> layers;
  Norm<Scalar> final_norm;
  Linear output;  // [vocab, d]: the output projection

  /// out[0, d) = the embedding of `token`.
  void embedding(Index token, Scalar* out) const {
    (embed.size() ? embed : output).copy_row(token, out);
  }

  /// Bytes the weights hold (quantised ones as stored: codes and scales).
  size_t size_bytes(const ModelConfig& c) const {
    size_t n = 0;
    const auto add = [&](const auto& t) {
      if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value)
        n += t.stored_bytes();
      else
        n += static_cast<size_t>(t.size()) * sizeof(Scalar);
    };
    visit(c, [&](const std::string&, const auto& t, const std::vector<int64_t>&) { add(t); });
    if (c.tie_embeddings) add(embed);  // both were stored
    return n;
  }

  /// Turns bf16 dots (LinearWeight::set_bf16_dots: x rounded to bfloat16 inside the products)
  /// on or off for every linear map; on needs the config's weights to be bf16.
  void set_bf16_dots(const ModelConfig& c, bool on) {
    RETNET_REQUIRE(!on || c.weights == WeightType::kBF16,
                   std::string("bf16 dots need bf16 weights, and these are ") +
                       weight_type_name(c.weights) + " (ask for bf16: --weights bf16)");
    visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>&) {
      if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value) t.set_bf16_dots(on);
    });
  }

  /// Calls f(logical_name, tensor, expected_shape) for every tensor the config asks for, in
  /// the naming of the config's family (without the checkpoint's prefix). The one place that
  /// maps tensor names and shapes onto this struct.
  template <typename F>
  void visit(const ModelConfig& c, F&& f) {
    visit_impl(*this, c, f);
  }
  template <typename F>
  void visit(const ModelConfig& c, F&& f) const {
    visit_impl(*this, c, f);
  }

  /// Random weights (seeded, for tests and benchmarks): matrices ~ N(0, 1/in), norm weights
  /// ~ 1 + N(0, 0.1), biases ~ N(0, 0.1).
  /// The linear maps are then stored as `type` (the same draws, rounded or quantised).
  static ModelWeights random(const ModelConfig& c, uint64_t seed,
                             WeightType type = WeightType::kF32) {
    ModelWeights w;
    w.allocate(c, type);
    std::mt19937_64 rng(seed);
    w.visit(c, [&](const std::string& name, auto& t, const std::vector<int64_t>& shape) {
      const bool is_norm = shape.size() == 1 && name.find("bias") == std::string::npos &&
                           name.find("norm") != std::string::npos;
      const double stdev = shape.size() == 2 ? 1.0 / std::sqrt(double(shape[1])) : 0.1;
      std::normal_distribution<double> normal(is_norm ? 1.0 : 0.0, stdev);
      const Index cols = shape.size() == 2 ? shape[1] : 1;
      write_row_major(
          t, shape,
          [&](Index, Index n, Scalar* p) {
            for (Index i = 0; i < n * cols; ++i) p[i] = static_cast<Scalar>(normal(rng));
          },
          type);
    });
    return w;
  }

  /// Gives tensor t (a LinearWeight, Matrix or Vector) the shape and the values fill(first, n,
  /// p) writes to p for rows [first, first + n), row-major: checkpoints and random draws go
  /// through here. A LinearWeight gets `type` (its rows arrive a panel at a time); the others
  /// stay in Scalar and get all their rows at once.
  template <typename T, typename FillRows>
  static void write_row_major(T& t, const std::vector<int64_t>& shape, FillRows&& fill,
                              WeightType type = WeightType::kF32) {
    const Index rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
    if constexpr (is_linear_weight<T>::value) {
      t.assign(rows, cols, type, fill);
    } else {
      t.resize(rows, cols);
      fill(0, rows, t.data());
    }
  }

  /// Bytes of every tensor the config asks for, with the linear maps in `type`, counted from
  /// the shapes alone (in double, so that hostile sizes cannot overflow): what allocate() takes.
  static double bytes_for(const ModelConfig& c, WeightType type = WeightType::kF32) {
    ModelWeights shapes;  // empty tensors: only the layer list is allocated
    shapes.layers.resize(static_cast<size_t>(c.layers));
    double bytes = 0;
    shapes.visit(c, [&](const std::string&, const auto& t, const std::vector<int64_t>& shape) {
      if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value) {
        bytes += std::decay_t<decltype(t)>::bytes_for(shape[0], shape[1], type);
      } else {
        double n = sizeof(Scalar);
        for (int64_t extent : shape) n *= double(extent);
        bytes += n;
      }
    });
    return bytes;
  }

  /// Gives every tensor the shape the config asks for (all zero), the linear maps in `type`,
  /// after checking that they fit in memory.
  void allocate(const ModelConfig& c, WeightType type = WeightType::kF32) {
    c.validate();
    require_fits_in_memory(bytes_for(c, type), [] { return "the weights of this config"; });
    layers.resize(static_cast<size_t>(c.layers));
    visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>& shape) {
      if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value)
        t.resize(shape[0], shape[1], type);
      else
        t.setZero(shape[0], shape.size() == 2 ? shape[1] : 1);
    });
  }

 private:
  /// The one walk over the tensors: names from the family's table (model/family.hpp), shapes
  /// and presence from the config, in checkpoint order.
  template <typename Self, typename F>
  static void visit_impl(Self& w, const ModelConfig& c, F& f) {
    constexpr bool kWrite = !std::is_const_v<Self>;
    const FamilyTable& table = family_table(c.family);
    const FamilyTensorNames& n = table.tensors;
    const int64_t d = c.embed_dim, ffn = c.ffn_dim, vocab = c.vocab_size;
    const int64_t key_dim = c.key_dim(), value_dim = c.value_embed_dim;
    const int64_t group = c.heads / c.key_value_heads();
    const NormKind kind = table.rms_norm_only ? NormKind::kRMSNorm : c.norm;
    auto norm = [&](const std::string& name, auto& m, int64_t size) {
      if constexpr (kWrite) m.kind = kind;
      f(name + ".weight", m.weight, std::vector<int64_t>{size});
      if (kind == NormKind::kLayerNorm) f(name + ".bias", m.bias, std::vector<int64_t>{size});
    };
    f(n.embed, c.tie_embeddings ? w.output : w.embed, std::vector<int64_t>{vocab, d});
    if (n.embed_norm && c.layernorm_embedding) norm(n.embed_norm, w.embed_norm, d);
    // The families' own switches (RetNetModel::layer_params reads them the same way).
    const bool gate = !table.fla_switches || c.output_gate;
    const bool head_norm = table.fla_switches && c.head_norm_weight;
    const bool fused_gate_up = table.fla_switches && c.fused_gate_up;
    const bool glu = !n.fc1_bias || c.use_glu;
    for (int64_t i = 0; i < c.layers; ++i) {
      auto& l = w.layers[static_cast<size_t>(i)];
      const std::string p = "layers." + std::to_string(i) + ".";
      norm(p + n.retention_norm, l.retention_norm, d);
      f(p + n.q_proj, l.retention.q_proj, std::vector<int64_t>{key_dim, d});
      f(p + n.k_proj, l.retention.k_proj, std::vector<int64_t>{key_dim / group, d});
      f(p + n.v_proj, l.retention.v_proj, std::vector<int64_t>{value_dim / group, d});
      if (gate) f(p + n.g_proj, l.retention.g_proj, std::vector<int64_t>{value_dim, d});
      if (head_norm)
        f(p + (gate && c.fused_norm_gate ? n.head_norm_fused : n.head_norm),
          l.retention.head_norm_weight, std::vector<int64_t>{c.value_head_dim()});
      f(p + n.out_proj, l.retention.out_proj, std::vector<int64_t>{d, value_dim});
      norm(p + n.ffn_norm, l.final_norm, d);
      if (fused_gate_up) {
        f(p + n.fc1, l.ffn.fc1_and_gate, std::vector<int64_t>{2 * ffn, d});
      } else {
        f(p + n.fc1, l.ffn.fc1, std::vector<int64_t>{ffn, d});
        if (glu) f(p + n.gate, l.ffn.gate, std::vector<int64_t>{ffn, d});
      }
      if (!glu) {
        f(p + n.fc1_bias, l.ffn.fc1_bias, std::vector<int64_t>{ffn});
        f(p + n.fc2_bias, l.ffn.fc2_bias, std::vector<int64_t>{d});
        if (c.subln) {
          if constexpr (kWrite) l.ffn.sub_norm.kind = NormKind::kLayerNorm;  // always (torchscale)
          f(p + n.sub_norm + ".weight", l.ffn.sub_norm.weight, std::vector<int64_t>{ffn});
          f(p + n.sub_norm + ".bias", l.ffn.sub_norm.bias, std::vector<int64_t>{ffn});
        }
      }
      f(p + n.fc2, l.ffn.fc2, std::vector<int64_t>{d, ffn});
    }
    norm(n.final_norm, w.final_norm, d);
    if (!c.tie_embeddings) f(n.output, w.output, std::vector<int64_t>{vocab, d});
  }
};

template <typename Scalar>
using DenseModelWeights = ModelWeights<Scalar, Matrix<Scalar>>;

}  // namespace retnet
