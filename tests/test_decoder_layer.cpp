// layers/decoder_layer.hpp: one pre-norm decoder layer (docs/NUMERICS.md#decoder),
//     x = x + MSR(Norm_ret(x));   x = x + FFN(Norm_ffn(x))
// against the formulas in long double (layer_reference.hpp), with random weights, in double, in
// every form and continuing a state, with RMSNorm and a GLU feed-forward (torchscale's
// defaults) and with LayerNorm (weight and bias) and the plain feed-forward with subln.
// Float and the options of each block are covered by test_multiscale_retention.cpp and
// test_feed_forward.cpp. Tolerance: 1e-11 relative.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "compare.hpp"
#include "layer_reference.hpp"
#include "retnet/layers/decoder_layer.hpp"

namespace {

using retnet::Form;
using retnet::Index;
using retnet::LinearWeight;
using retnet::Matrix;
using retnet::NormKind;
using retnet::Vector;
using retnet::testing::random_matrix;
using retnet::testing::random_vector;
using retnet::testing::relative_error;

constexpr Index kWidth = 8, kHidden = 12, kBatch = 2, kTime = 6;
constexpr double kEps = 1e-5;

// A layer's weights as plain matrices, and the same layer as the library holds it.
struct Layer {
  bool layer_norm = false;
  Vector<double> retention_weight, retention_bias, final_weight, final_bias;
  retnet::testing::MsrSpec msr;
  retnet::testing::FfnSpec ffn;
  retnet::DecoderLayerParams<double> params;
  retnet::DecoderLayerWeights<double> weights;
};

Layer random_layer(bool layer_norm, std::mt19937_64& rng) {
  Layer l;
  l.layer_norm = layer_norm;
  l.retention_weight = random_vector(kWidth, 1.0, 0.3, rng);
  l.final_weight = random_vector(kWidth, 1.0, 0.3, rng);
  if (layer_norm) {
    l.retention_bias = random_vector(kWidth, 0.0, 0.3, rng);
    l.final_bias = random_vector(kWidth, 0.0, 0.3, rng);
  }
  auto& m = l.msr;
  m.heads = 2, m.kv_heads = 2, m.dk = 4, m.dv = 6, m.eps = kEps, m.decays = {0.96875, 0.984375};
  m.layer_norm = layer_norm;
  m.wq = random_matrix(8, kWidth, 0.4, rng), m.wk = random_matrix(8, kWidth, 0.4, rng);
  m.wv = random_matrix(12, kWidth, 0.4, rng), m.wg = random_matrix(12, kWidth, 0.4, rng);
  m.wo = random_matrix(kWidth, 12, 0.4, rng);
  auto& f = l.ffn;
  f.glu = !layer_norm, f.subln = layer_norm, f.eps = kEps;
  f.fc1 = random_matrix(kHidden, kWidth, 0.4, rng),
  f.fc2 = random_matrix(kWidth, kHidden, 0.4, rng);
  if (f.glu) {
    f.gate = random_matrix(kHidden, kWidth, 0.4, rng);
  } else {
    f.fc1_bias = random_vector(kHidden, 0.0, 0.3, rng),
    f.fc2_bias = random_vector(kWidth, 0.0, 0.3, rng);
    f.subln_weight = random_vector(kHidden, 1.0, 0.3, rng);
    f.subln_bias = random_vector(kHidden, 0.0, 0.3, rng);
  }

  auto& p = l.params;
  p.eps = kEps;
  p.retention.heads = m.heads, p.retention.key_head_dim = m.dk, p.retention.value_head_dim = m.dv;
  p.retention.head_norm = layer_norm ? NormKind::kLayerNorm : NormKind::kRMSNorm;
  p.retention.eps = kEps, p.retention.decays = m.decays;
  p.ffn.glu = f.glu, p.ffn.subln = f.subln, p.ffn.eps = kEps;
  auto& w = l.weights;
  const NormKind kind = layer_norm ? NormKind::kLayerNorm : NormKind::kRMSNorm;
  w.retention_norm.kind = w.final_norm.kind = kind;
  w.retention_norm.weight = l.retention_weight, w.retention_norm.bias = l.retention_bias;
  w.final_norm.weight = l.final_weight, w.final_norm.bias = l.final_bias;
  w.retention.q_proj = LinearWeight<double>(m.wq), w.retention.k_proj = LinearWeight<double>(m.wk);
  w.retention.v_proj = LinearWeight<double>(m.wv), w.retention.g_proj = LinearWeight<double>(m.wg);
  w.retention.out_proj = LinearWeight<double>(m.wo);
  w.ffn.fc1 = LinearWeight<double>(f.fc1), w.ffn.fc2 = LinearWeight<double>(f.fc2);
  if (f.glu) {
    w.ffn.gate = LinearWeight<double>(f.gate);
  } else {
    w.ffn.fc1_bias = f.fc1_bias, w.ffn.fc2_bias = f.fc2_bias;
    w.ffn.sub_norm.kind = NormKind::kLayerNorm;
    w.ffn.sub_norm.weight = f.subln_weight, w.ffn.sub_norm.bias = f.subln_bias;
  }
  return l;
}

// The decoder norm of every row: norm(x) ⊙ weight (+ bias).
Matrix<double> norm_rows(const Layer& l, const Matrix<double>& x, const Vector<double>& weight,
                         const Vector<double>& bias) {
  Matrix<double> y(x.rows(), x.cols());
  for (Index r = 0; r < x.rows(); ++r) {
    retnet::testing::Row row(x.row(r).data(), x.row(r).data() + x.cols());
    retnet::testing::norm_in_place(l.layer_norm, kEps, row, 0, x.cols(), weight, bias);
    for (Index c = 0; c < x.cols(); ++c) y(r, c) = double(row[c]);
  }
  return y;
}

// The layer on one sequence [T, d] from position 0.
Matrix<double> layer_by_formula(const Layer& l, const Matrix<double>& x) {
  const Matrix<double> h = x + retnet::testing::msr_by_formula(
                                   l.msr, norm_rows(l, x, l.retention_weight, l.retention_bias));
  return h + retnet::testing::ffn_by_formula(l.ffn, norm_rows(l, h, l.final_weight, l.final_bias));
}

// Rows [from, to) of every batch entry through the layer, continuing `state`.
Matrix<double> run(const Layer& l, const Matrix<double>& x, Index from, Index to, Form form,
                   retnet::RetentionState<double>& state) {
  Matrix<double> part(kBatch * (to - from), kWidth);
  for (Index b = 0; b < kBatch; ++b)
    part.middleRows(b * (to - from), to - from) = x.middleRows(b * kTime + from, to - from);
  retnet::SequenceLayout<double> layout;
  layout.set(kBatch, to - from, std::vector<int64_t>(kBatch, from), l.msr.dk);
  retnet::DecoderLayerWorkspace<double> ws;
  retnet::decoder_layer(l.params, l.weights, part, layout, form, state, ws);
  return part;
}

void check_layer(bool layer_norm) {
  std::mt19937_64 rng(layer_norm ? 61 : 67);
  const Layer l = random_layer(layer_norm, rng);
  const Matrix<double> x = random_matrix(kBatch * kTime, kWidth, 1.0, rng);
  Matrix<double> expected(kBatch * kTime, kWidth);
  for (Index b = 0; b < kBatch; ++b)
    expected.middleRows(b * kTime, kTime) = layer_by_formula(l, x.middleRows(b * kTime, kTime));
  for (Form form : {Form::kParallel, Form::kChunkwise, Form::kRecurrent}) {
    retnet::RetentionState<double> state;
    EXPECT_LE(relative_error(run(l, x, 0, kTime, form, state), expected), 1e-11)
        << retnet::form_name(form);
  }
  const Index prefix = 2;
  retnet::RetentionState<double> state;
  run(l, x, 0, prefix, Form::kParallel, state);
  const Matrix<double> rest = run(l, x, prefix, kTime, Form::kRecurrent, state);
  for (Index b = 0; b < kBatch; ++b)
    EXPECT_LE(relative_error(rest.middleRows(b * (kTime - prefix), kTime - prefix),
                             expected.middleRows(b * kTime + prefix, kTime - prefix)),
              1e-11)
        << "entry " << b << " continued";
}

TEST(DecoderLayer, RMSNormAndGluMatchTheFormula) {
  check_layer(false);
}
TEST(DecoderLayer, LayerNormAndPlainFeedForwardMatchTheFormula) {
  check_layer(true);
}

TEST(DecoderLayer, RejectsAStateOfAnotherShape) {
  std::mt19937_64 rng(71);
  const Layer l = random_layer(false, rng);
  const Matrix<double> x = random_matrix(kBatch * kTime, kWidth, 1.0, rng);
  retnet::RetentionState<double> wrong(kBatch + 1, l.msr.heads, l.msr.dk, l.msr.dv + 1);
  wrong.setZero();
  EXPECT_THROW(run(l, x, 0, kTime, Form::kChunkwise, wrong), retnet::InvalidArgument);
}

}  // namespace
