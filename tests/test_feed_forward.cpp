// layers/feed_forward.hpp: the feed-forward block (docs/NUMERICS.md#feed-forward) against the
// formulas in long double (layer_reference.hpp), with random weights, in every kind: GLU with
// GELU and swish, the fused GLU weight, plain with and without the subln LayerNorm.
// Tolerance: 1e-13 relative in double (sums of d and F products), 3e-6 in float.
#include <gtest/gtest.h>

#include <random>

#include "compare.hpp"
#include "layer_reference.hpp"
#include "retnet/layers/feed_forward.hpp"

namespace {

using retnet::Activation;
using retnet::FeedForwardParams;
using retnet::FeedForwardWeights;
using retnet::FeedForwardWorkspace;
using retnet::Index;
using retnet::LinearWeight;
using retnet::Matrix;
using retnet::NormKind;
using retnet::testing::FfnSpec;
using retnet::testing::random_matrix;
using retnet::testing::random_vector;
using retnet::testing::relative_error;

constexpr Index kWidth = 12, kHidden = 20, kRows = 5;

FfnSpec random_spec(bool glu, bool swish, bool subln, std::mt19937_64& rng) {
  FfnSpec s;
  s.glu = glu, s.swish = swish, s.subln = subln, s.eps = 1e-5;
  s.fc1 = random_matrix(kHidden, kWidth, 0.4, rng);
  s.fc2 = random_matrix(kWidth, kHidden, 0.4, rng);
  if (glu) {
    s.gate = random_matrix(kHidden, kWidth, 0.4, rng);
  } else {
    s.fc1_bias = random_vector(kHidden, 0.0, 0.5, rng);
    s.fc2_bias = random_vector(kWidth, 0.0, 0.5, rng);
    if (subln) {
      s.subln_weight = random_vector(kHidden, 1.0, 0.3, rng);
      s.subln_bias = random_vector(kHidden, 0.0, 0.3, rng);
    }
  }
  return s;
}

template <typename Scalar>
Matrix<Scalar> as(const Matrix<double>& m) {
  return m.cast<Scalar>();
}

// The library's params and weights for a spec; `fused` stacks fc1 over gate into one weight.
template <typename Scalar>
void build(const FfnSpec& s, bool fused, FeedForwardParams<Scalar>& p,
           FeedForwardWeights<Scalar>& w) {
  p.activation = s.swish ? Activation::kSwish : Activation::kGelu;
  p.glu = s.glu, p.fused_gate = fused, p.subln = s.subln, p.eps = Scalar(s.eps);
  w.fc2 = LinearWeight<Scalar>(as<Scalar>(s.fc2));
  if (fused) {
    Matrix<double> stacked(2 * kHidden, kWidth);
    stacked << s.fc1, s.gate;
    w.fc1_and_gate = LinearWeight<Scalar>(as<Scalar>(stacked));
    return;
  }
  w.fc1 = LinearWeight<Scalar>(as<Scalar>(s.fc1));
  if (s.glu) {
    w.gate = LinearWeight<Scalar>(as<Scalar>(s.gate));
    return;
  }
  w.fc1_bias = s.fc1_bias.cast<Scalar>();
  w.fc2_bias = s.fc2_bias.cast<Scalar>();
  w.sub_norm.kind = NormKind::kLayerNorm;
  w.sub_norm.weight = s.subln_weight.cast<Scalar>();
  w.sub_norm.bias = s.subln_bias.cast<Scalar>();
}

template <typename Scalar>
void check_every_kind(double tolerance) {
  std::mt19937_64 rng(41);
  struct Kind {
    bool glu, swish, subln, fused;
  };
  for (Kind k : {Kind{true, false, false, false}, Kind{true, true, false, false},
                 Kind{true, true, false, true}, Kind{false, false, false, false},
                 Kind{false, true, true, false}, Kind{false, false, true, false}}) {
    const FfnSpec s = random_spec(k.glu, k.swish, k.subln, rng);
    FeedForwardParams<Scalar> p;
    FeedForwardWeights<Scalar> w;
    build(s, k.fused, p, w);
    const Matrix<double> x = random_matrix(kRows, kWidth, 1.0, rng);
    FeedForwardWorkspace<Scalar> ws;
    Matrix<Scalar> y;
    retnet::feed_forward(p, w, as<Scalar>(x), ws, y);
    const Matrix<double> expected =
        retnet::testing::ffn_by_formula(s, as<Scalar>(x).template cast<double>());
    EXPECT_LE(relative_error(y, expected), tolerance)
        << "glu=" << k.glu << " swish=" << k.swish << " subln=" << k.subln << " fused=" << k.fused;
    // A second call with the workspace and output of the first gives the same result.
    Matrix<Scalar> again = y;
    retnet::feed_forward(p, w, as<Scalar>(x), ws, again);
    EXPECT_EQ(again, y);
  }
}

TEST(FeedForward, EveryKindMatchesTheFormulaInDouble) {
  check_every_kind<double>(1e-13);
}
TEST(FeedForward, EveryKindMatchesTheFormulaInFloat) {
  check_every_kind<float>(3e-6);
}

// GELU and swish, and subln on and off, give different results on the same weights: the
// comparison above could not pass with the wrong activation or a skipped norm.
TEST(FeedForward, ActivationAndSublnChangeTheResult) {
  std::mt19937_64 rng(43);
  FfnSpec s = random_spec(false, false, true, rng);
  const Matrix<double> x = random_matrix(kRows, kWidth, 1.0, rng);
  const Matrix<double> gelu_subln = retnet::testing::ffn_by_formula(s, x);
  s.swish = true;
  EXPECT_GT(relative_error(retnet::testing::ffn_by_formula(s, x), gelu_subln), 1e-3);
  s.swish = false, s.subln = false;
  EXPECT_GT(relative_error(retnet::testing::ffn_by_formula(s, x), gelu_subln), 1e-3);
}

TEST(FeedForward, RejectsAnInputOfTheWrongWidth) {
  std::mt19937_64 rng(47);
  for (bool fused : {false, true}) {
    FeedForwardParams<double> p;
    FeedForwardWeights<double> w;
    build(random_spec(true, false, false, rng), fused, p, w);
    FeedForwardWorkspace<double> ws;
    Matrix<double> y;
    EXPECT_THROW(retnet::feed_forward(p, w, random_matrix(kRows, kWidth + 1, 1.0, rng), ws, y),
                 retnet::InvalidArgument)
        << fused;
  }
}

}  // namespace
