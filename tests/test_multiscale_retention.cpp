// layers/multiscale_retention.hpp: the MSR block (docs/NUMERICS.md#multi-scale-retention and
// #scale-factors) against the formulas in long double (layer_reference.hpp), with random
// weights, in every form, from an empty state and continuing one, for each family's options:
// torchscale's (rotation by pairs, scale factors, gate), fla's (rotation by halves, plain
// retention, grouped key/value heads, a weight on the head norm, no gate) and a LayerNorm head
// norm with the row clamp active. Tolerance: 1e-11 relative. In double only: the float block is
// held to the reference logits of every family by test_model.cpp and test_families.cpp, and a
// second scalar type would compile every kernel twice in this file.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "compare.hpp"
#include "layer_reference.hpp"
#include "retnet/layers/multiscale_retention.hpp"

namespace {

using retnet::Form;
using retnet::Index;
using retnet::LinearWeight;
using retnet::Matrix;
using retnet::testing::MsrSpec;
using retnet::testing::random_matrix;
using retnet::testing::relative_error;

constexpr Index kWidth = 6, kBatch = 2, kTime = 7;
const Form kForms[] = {Form::kParallel, Form::kChunkwise, Form::kRecurrent};

enum class Family { kTorchscale, kFla, kLayerNormClamped };

// eps 0.5 in the torchscale case: large enough against the retention outputs that the scale
// factors, which the head norm cancels but for its eps, change the result.
MsrSpec random_spec(Family family, std::mt19937_64& rng) {
  MsrSpec s;
  double spread = 0.4;
  if (family == Family::kTorchscale) {
    s.heads = 2, s.kv_heads = 2, s.dk = 4, s.dv = 3, s.eps = 0.5, s.decays = {0.9, 0.6};
  } else if (family == Family::kFla) {
    s.heads = 4, s.kv_heads = 2, s.dk = 4, s.dv = 2, s.eps = 1e-5;
    s.halves = true, s.torchscale_scaling = false, s.gate = false;
    s.decays = {0.95, 0.9, 0.8, 0.5};
    s.head_weight = retnet::testing::random_vector(s.dv, 1.0, 0.3, rng);
  } else {
    s.heads = 2, s.kv_heads = 2, s.dk = 2, s.dv = 4, s.eps = 1e-3, s.decays = {0.97, 0.7};
    s.layer_norm = true;
    spread = 2.0;  // q·k sums well above c_n: the row clamp divides
  }
  s.wq = random_matrix(s.heads * s.dk, kWidth, spread, rng);
  s.wk = random_matrix(s.kv_heads * s.dk, kWidth, spread, rng);
  s.wv = random_matrix(s.kv_heads * s.dv, kWidth, 0.4, rng);
  if (s.gate) s.wg = random_matrix(s.heads * s.dv, kWidth, 0.4, rng);
  s.wo = random_matrix(kWidth, s.heads * s.dv, 0.4, rng);
  return s;
}

struct Block {
  retnet::RetentionParams<double> params;
  retnet::RetentionWeights<double> weights;
};

Block build(const MsrSpec& s) {
  Block b;
  auto& p = b.params;
  p.heads = s.heads, p.key_head_dim = s.dk, p.value_head_dim = s.dv, p.key_value_heads = s.kv_heads;
  p.head_norm = s.layer_norm ? retnet::NormKind::kLayerNorm : retnet::NormKind::kRMSNorm;
  p.eps = s.eps;
  p.head_norm_weight = s.head_weight.size() > 0;
  p.output_gate = s.gate;
  p.scaling = s.torchscale_scaling ? retnet::RetentionScaling::kTorchscale
                                   : retnet::RetentionScaling::kNone;
  p.rotation = s.halves ? retnet::RotationLayout::kHalves : retnet::RotationLayout::kPairs;
  p.decays = s.decays;
  auto& w = b.weights;
  w.q_proj = LinearWeight<double>(s.wq);
  w.k_proj = LinearWeight<double>(s.wk);
  w.v_proj = LinearWeight<double>(s.wv);
  if (s.gate) w.g_proj = LinearWeight<double>(s.wg);
  w.out_proj = LinearWeight<double>(s.wo);
  w.head_norm_weight = s.head_weight;
  return b;
}

// Rows [from, to) of every batch entry of `x` ([batch · kTime, d], entry-major).
Matrix<double> time_slice(const Matrix<double>& x, Index from, Index to) {
  Matrix<double> part(kBatch * (to - from), x.cols());
  for (Index b = 0; b < kBatch; ++b)
    part.middleRows(b * (to - from), to - from) = x.middleRows(b * kTime + from, to - from);
  return part;
}

// Runs rows [from, to) of each entry through the block, continuing `state`.
Matrix<double> run(const Block& block, const Matrix<double>& x, Index from, Index to, Form form,
                   retnet::RetentionState<double>& state) {
  retnet::SequenceLayout<double> layout;
  layout.set(kBatch, to - from, std::vector<int64_t>(kBatch, from), block.params.key_head_dim,
             block.params.rotation);
  retnet::RetentionWorkspace<double> ws;
  Matrix<double> y;
  const Matrix<double> part = time_slice(x, from, to);
  retnet::multiscale_retention(block.params, block.weights, part, layout, form, state, ws, y);
  return y;
}

void check_family(Family family) {
  std::mt19937_64 rng(53 + int(family));
  const MsrSpec spec = random_spec(family, rng);
  const Matrix<double> x = random_matrix(kBatch * kTime, kWidth, 1.0, rng);
  Matrix<double> expected(kBatch * kTime, kWidth);
  Index clamped = 0;
  for (Index b = 0; b < kBatch; ++b)
    expected.middleRows(b * kTime, kTime) =
        retnet::testing::msr_by_formula(spec, x.middleRows(b * kTime, kTime), &clamped);
  if (family == Family::kLayerNormClamped) {
    EXPECT_GT(clamped, 0) << "the clamp never divides";
  }
  const Block block = build(spec);

  for (Form form : kForms) {
    retnet::RetentionState<double> state;
    EXPECT_LE(relative_error(run(block, x, 0, kTime, form, state), expected), 1e-11)
        << int(family) << " " << retnet::form_name(form);
  }
  // A prefix read by any form, the rest by the chunkwise or recurrent form from its state.
  const Index prefix = 3;
  const Matrix<double> expected_rest = time_slice(expected, prefix, kTime);
  for (Form first : kForms)
    for (Form second : {Form::kChunkwise, Form::kRecurrent}) {
      retnet::RetentionState<double> state;
      run(block, x, 0, prefix, first, state);
      EXPECT_EQ(state.dimension(3), spec.dv + (spec.torchscale_scaling ? 1 : 0));
      EXPECT_LE(relative_error(run(block, x, prefix, kTime, second, state), expected_rest), 1e-11)
          << int(family) << " " << retnet::form_name(first) << " then "
          << retnet::form_name(second);
    }
}

TEST(MultiscaleRetention, TorchscaleOptionsMatchTheFormula) {
  check_family(Family::kTorchscale);
}
TEST(MultiscaleRetention, FlaOptionsMatchTheFormula) {
  check_family(Family::kFla);
}
TEST(MultiscaleRetention, LayerNormHeadsWithTheClampMatchTheFormula) {
  check_family(Family::kLayerNormClamped);
}
// The torchscale case is one where the scale factors change the result: a block that skipped
// them could not pass the comparison above.
TEST(MultiscaleRetention, TheScaleFactorsShowThroughTheHeadNormsEps) {
  std::mt19937_64 rng(53);
  MsrSpec spec = random_spec(Family::kTorchscale, rng);
  const Matrix<double> x = random_matrix(kTime, kWidth, 1.0, rng);
  const Matrix<double> scaled = retnet::testing::msr_by_formula(spec, x);
  spec.torchscale_scaling = false;
  EXPECT_GT(relative_error(retnet::testing::msr_by_formula(spec, x), scaled), 1e-3);
}

TEST(MultiscaleRetention, RejectsBadShapesAndStates) {
  std::mt19937_64 rng(59);
  const MsrSpec spec = random_spec(Family::kTorchscale, rng);
  const Matrix<double> x = random_matrix(kBatch * kTime, kWidth, 1.0, rng);
  Block block = build(spec);
  retnet::SequenceLayout<double> layout;
  layout.set(kBatch, kTime, {0, 0}, spec.dk);
  retnet::RetentionWorkspace<double> ws;
  Matrix<double> y;
  auto call = [&](const Matrix<double>& input, Form form, retnet::RetentionState<double>& state) {
    retnet::multiscale_retention(block.params, block.weights, input, layout, form, state, ws, y);
  };
  retnet::RetentionState<double> empty;
  EXPECT_THROW(call(random_matrix(kBatch * kTime, kWidth + 1, 1.0, rng), Form::kChunkwise, empty),
               retnet::InvalidArgument);
  // A state of another layer's shape (dv columns, without the row-sum column).
  retnet::RetentionState<double> wrong(kBatch, spec.heads, spec.dk, spec.dv);
  wrong.setZero();
  EXPECT_THROW(call(x, Form::kRecurrent, wrong), retnet::InvalidArgument);
  // The parallel form starts from an empty state only.
  retnet::RetentionState<double> state;
  call(x, Form::kChunkwise, state);
  EXPECT_THROW(call(x, Form::kParallel, state), retnet::InvalidArgument);
  // One decay per head.
  block.params.decays.pop_back();
  retnet::RetentionState<double> fresh;
  EXPECT_THROW(call(x, Form::kChunkwise, fresh), retnet::InvalidArgument);
}

}  // namespace
