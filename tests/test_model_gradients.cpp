// Gradients of every op and layer the decoder runs and of the whole model (ops/*_backward.hpp,
// ops/cross_entropy.hpp, layers/*_backward.hpp, model/model_gradients.hpp), in double, against
// central finite differences; the whole model's against differences of the INFERENCE model's
// loss (RetNetModel on the same weights), an independent forward; with dropout, against
// differences of the masked loss.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <retnet/model/model_gradients.hpp>
#include <string>

#include "pool_ignores_load.hpp"

namespace {

using retnet::Activation;
using retnet::DenseModelWeights;
using retnet::Form;
using retnet::Index;
using retnet::Matrix;
using retnet::ModelConfig;
using retnet::NormKind;

Matrix<double> random_matrix(Index rows, Index cols, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  Matrix<double> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

/// Central differences of loss() along each of the n values at x, against grad; returns the
/// worst |numeric - analytic| / (1 + |numeric|).
double worst_difference(double* x, const double* grad, Index n, const std::function<double()>& loss,
                        double h = 1e-5) {
  // Thousands of tiny forwards: one thread, so that none waits for a descheduled team member
  // on a busy machine.
  retnet::set_num_threads(1);
  double worst = 0;
  for (Index i = 0; i < n; ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    worst = std::max(worst, std::abs(numeric - grad[i]) / (1.0 + std::abs(numeric)));
  }
  return worst;
}

double dot(const Matrix<double>& a, const Matrix<double>& b) {
  return (a.array() * b.array()).sum();
}

TEST(OpGradients, NormsMatchFiniteDifferences) {
  std::mt19937 rng(1);
  for (const NormKind kind : {NormKind::kRMSNorm, NormKind::kLayerNorm}) {
    retnet::Norm<double> norm;
    norm.kind = kind;
    norm.weight = random_matrix(7, 1, rng);
    norm.bias = random_matrix(7, 1, rng);
    Matrix<double> x = random_matrix(3, 7, rng), dy = random_matrix(3, 7, rng), dx;
    retnet::Norm<double> grad;
    grad.weight.setZero(7), grad.bias.setZero(7);
    retnet::norm_backward(norm, 1e-3, x, dy, dx, grad);
    const auto loss = [&] {
      Matrix<double> y;
      norm.apply(x, 1e-3, y);
      return dot(y, dy);
    };
    EXPECT_LT(worst_difference(x.data(), dx.data(), x.size(), loss), 1e-8);
    EXPECT_LT(worst_difference(norm.weight.data(), grad.weight.data(), 7, loss), 1e-8);
    if (kind == NormKind::kLayerNorm) {
      EXPECT_LT(worst_difference(norm.bias.data(), grad.bias.data(), 7, loss), 1e-8);
    }
  }
}

TEST(OpGradients, ActivationsRotationAndCrossEntropy) {
  for (double x : {-30.0, -3.0, -0.5, 0.0, 0.7, 4.0, 30.0}) {
    const double h = 1e-6;
    EXPECT_NEAR(retnet::swish_derivative(x),
                (retnet::swish(x + h) - retnet::swish(x - h)) / (2 * h), 1e-8);
    EXPECT_NEAR(retnet::gelu_derivative(x), (retnet::gelu(x + h) - retnet::gelu(x - h)) / (2 * h),
                1e-8);
  }
  std::mt19937 rng(2);
  for (const auto layout : {retnet::RotationLayout::kPairs, retnet::RotationLayout::kHalves}) {
    retnet::RotationTable<double> table;
    table.compute({0, 5, 117}, 6, layout);
    const Matrix<double> z = random_matrix(1, 6, rng), dy = random_matrix(1, 6, rng);
    Matrix<double> rz(1, 6), back(1, 6);
    table.rotate(z.data(), 2, 6, rz.data());
    retnet::rotate_backward(table, dy.data(), 2, 6, back.data());
    EXPECT_NEAR(dot(rz, dy), dot(z, back), 1e-12);  // <R z, y> = <z, Rᵀ y>
  }
  Matrix<double> logits = random_matrix(4, 5, rng, 3.0), d;
  const int32_t targets[] = {2, -100, 0, 4};
  const auto ce = retnet::cross_entropy(logits, targets, -100, 0.5, &d);
  EXPECT_EQ(ce.count, 3);
  double brute = 0;
  for (Index r : {0, 2, 3}) {
    double sum = 0;
    for (Index j = 0; j < 5; ++j) sum += std::exp(logits(r, j));
    brute += std::log(sum) - logits(r, targets[r]);
  }
  EXPECT_NEAR(ce.sum, brute, 1e-12);
  EXPECT_EQ(d.row(1).norm(), 0.0);
  const auto loss = [&] { return 0.5 * retnet::cross_entropy(logits, targets, -100).sum; };
  EXPECT_LT(worst_difference(logits.data(), d.data(), logits.size(), loss), 1e-8);
  const int32_t bad[] = {2, 7, 0, 4};
  EXPECT_THROW(retnet::cross_entropy(logits, bad, -100), retnet::Error);
}

TEST(LayerGradients, FeedForwardEveryKind) {
  std::mt19937 rng(3);
  const Index d = 5, ffn = 6, rows = 4;
  for (int kind = 0; kind < 4; ++kind)
    for (const Activation act : {Activation::kGelu, Activation::kSwish}) {
      retnet::FeedForwardParams<double> p;
      p.activation = act, p.glu = kind < 2, p.fused_gate = kind == 1, p.subln = kind == 3;
      retnet::DenseFeedForwardWeights<double> w, g;
      w.fc1 = random_matrix(ffn, d, rng), w.gate = random_matrix(ffn, d, rng);
      w.fc1_and_gate = random_matrix(2 * ffn, d, rng), w.fc2 = random_matrix(d, ffn, rng);
      w.fc1_bias = random_matrix(ffn, 1, rng), w.fc2_bias = random_matrix(d, 1, rng);
      w.sub_norm.kind = NormKind::kLayerNorm;
      w.sub_norm.weight = random_matrix(ffn, 1, rng), w.sub_norm.bias = random_matrix(ffn, 1, rng);
      g.fc1.setZero(ffn, d), g.gate.setZero(ffn, d), g.fc1_and_gate.setZero(2 * ffn, d);
      g.fc2.setZero(d, ffn), g.fc1_bias.setZero(ffn), g.fc2_bias.setZero(d);
      g.sub_norm.weight.setZero(ffn), g.sub_norm.bias.setZero(ffn);
      Matrix<double> x = random_matrix(rows, d, rng), dy = random_matrix(rows, d, rng), y, dx;
      retnet::FeedForwardActivations<double> saved;
      retnet::feed_forward_train(p, w, x, saved, y);
      // The same function as the inference block on the same weights.
      retnet::FeedForwardWeights<double> lw;
      lw.fc1 = retnet::LinearWeight<double>(w.fc1), lw.gate = retnet::LinearWeight<double>(w.gate);
      lw.fc1_and_gate = retnet::LinearWeight<double>(w.fc1_and_gate);
      lw.fc2 = retnet::LinearWeight<double>(w.fc2);
      lw.fc1_bias = w.fc1_bias, lw.fc2_bias = w.fc2_bias, lw.sub_norm = w.sub_norm;
      retnet::FeedForwardWorkspace<double> ws;
      Matrix<double> y_inference;
      retnet::feed_forward(p, lw, x, ws, y_inference);
      EXPECT_LT((y - y_inference).cwiseAbs().maxCoeff(), 1e-12) << kind;
      retnet::feed_forward_backward(p, w, x, saved, dy, dx, g);
      const auto loss = [&] {
        retnet::FeedForwardActivations<double> s;
        Matrix<double> out;
        retnet::feed_forward_train(p, w, x, s, out);
        return dot(out, dy);
      };
      const std::string name = "kind " + std::to_string(kind);
      EXPECT_LT(worst_difference(x.data(), dx.data(), x.size(), loss), 1e-7) << name;
      Matrix<double>& fc1 = kind == 1 ? w.fc1_and_gate : w.fc1;
      Matrix<double>& g_fc1 = kind == 1 ? g.fc1_and_gate : g.fc1;
      EXPECT_LT(worst_difference(fc1.data(), g_fc1.data(), fc1.size(), loss), 1e-7) << name;
      EXPECT_LT(worst_difference(w.fc2.data(), g.fc2.data(), w.fc2.size(), loss), 1e-7) << name;
      if (kind == 0) {
        EXPECT_LT(worst_difference(w.gate.data(), g.gate.data(), w.gate.size(), loss), 1e-7);
      }
      if (kind >= 2) {
        EXPECT_LT(worst_difference(w.fc1_bias.data(), g.fc1_bias.data(), ffn, loss), 1e-7);
        EXPECT_LT(worst_difference(w.fc2_bias.data(), g.fc2_bias.data(), d, loss), 1e-7);
      }
      if (kind == 3) {
        EXPECT_LT(worst_difference(w.sub_norm.weight.data(), g.sub_norm.weight.data(), ffn, loss),
                  1e-7);
      }
    }
}

// ---- whole models ----

/// The mean next-token cross-entropy of `tokens` by the inference model (all logits, then a
/// brute-force log-softmax here): the independent reference the gradients are checked against.
double inference_loss(const ModelConfig& c, const DenseModelWeights<double>& w,
                      const std::vector<int32_t>& tokens) {
  const retnet::RetNetModel<double> model(c, retnet::linear_weights(c, w));
  retnet::TokenMatrix ids(1, Index(tokens.size()) - 1);
  for (Index t = 0; t < ids.cols(); ++t) ids(0, t) = tokens[t];
  const Matrix<double> logits = model.forward(ids, Form::kRecurrent);
  double sum = 0;
  for (Index t = 0; t < ids.cols(); ++t)
    sum += std::log(logits.row(t).array().exp().sum()) - logits(t, tokens[t + 1]);
  return sum / double(ids.cols());
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 11, c.embed_dim = 8, c.value_embed_dim = 12, c.heads = 2, c.ffn_dim = 10;
  c.layers = 2, c.activation = Activation::kSwish, c.chunk_size = 3;
  return c;
}

const std::vector<int32_t> kTokens = {1, 4, 9, 2, 2, 7, 10, 0, 5, 3};

/// Every entry of every tensor of the model's gradient against finite differences of the
/// inference model's loss.
void expect_model_gradients_match(const ModelConfig& c, uint64_t seed, double weight_scale = 1.0) {
  DenseModelWeights<double> w = DenseModelWeights<double>::random(c, seed), g;
  if (weight_scale != 1.0)
    w.visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>& shape) {
      if (shape.size() == 2) t *= weight_scale;
    });
  retnet::GradientOptions o;
  const double loss = retnet::sequence_loss_and_gradients(c, w, kTokens, o, g);
  EXPECT_NEAR(loss, inference_loss(c, w, kTokens), 1e-12);
  std::vector<std::pair<std::string, std::pair<double*, const double*>>> tensors;
  std::vector<double*> grads;
  g.visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>&) {
    grads.push_back(t.data());
  });
  size_t i = 0;
  w.visit(c, [&](const std::string& name, auto& t, const std::vector<int64_t>&) {
    const double worst = worst_difference(t.data(), grads[i++], t.size(),
                                          [&] { return inference_loss(c, w, kTokens); });
    EXPECT_LT(worst, 1e-6) << name;
  });
}

TEST(ModelGradients, TorchscaleGluRmsNorm) {
  expect_model_gradients_match(tiny_config(), 5);
}

TEST(ModelGradients, TorchscaleRowSumsPastTheClamp) {
  // Larger weights give row sums |u_n| / c_n above 1 in most rows, where the clamp passes them
  // through and their gradient flows; a large eps keeps the per-head norm from cancelling it.
  ModelConfig c = tiny_config();
  c.eps = 0.05;
  expect_model_gradients_match(c, 6, 2.0);
}

TEST(ModelGradients, PlainFeedForwardLayerNormTiedScaledEmbedding) {
  ModelConfig c = tiny_config();
  c.use_glu = false, c.subln = true, c.norm = NormKind::kLayerNorm,
  c.activation = Activation::kGelu;
  c.tie_embeddings = true, c.scale_embedding = true, c.layernorm_embedding = true;
  expect_model_gradients_match(c, 7);
}

TEST(ModelGradients, SyncdothLmDecay) {
  ModelConfig c = tiny_config();
  c.family = retnet::Family::kSyncdoth, c.lm_decay = true;
  expect_model_gradients_match(c, 8);
}

TEST(ModelGradients, FlaGroupedHeadsNormWeightNoGate) {
  ModelConfig c = tiny_config();
  c.family = retnet::Family::kFla, c.heads = 4, c.value_embed_dim = 16, c.kv_heads = 2;
  c.head_norm_weight = true, c.output_gate = false;
  expect_model_gradients_match(c, 9);
  c.kv_heads = 0, c.output_gate = true, c.fused_gate_up = true;
  expect_model_gradients_match(c, 10);
}

double relative_difference(const ModelConfig& c, DenseModelWeights<double>& a,
                           DenseModelWeights<double>& b) {
  double diff = 0, norm = 0;
  std::vector<double*> bs;
  b.visit(
      c, [&](const std::string&, auto& t, const std::vector<int64_t>&) { bs.push_back(t.data()); });
  size_t i = 0;
  a.visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>&) {
    const double* other = bs[i++];
    for (Index j = 0; j < t.size(); ++j) {
      diff = std::max(diff, std::abs(t.data()[j] - other[j]));
      norm = std::max(norm, std::abs(other[j]));
    }
  });
  return diff / norm;
}

TEST(ModelGradients, FormsChunkSizesAndRecomputeAgree) {
  const ModelConfig c = tiny_config();
  const DenseModelWeights<double> w = DenseModelWeights<double>::random(c, 11);
  DenseModelWeights<double> reference, g;
  retnet::GradientOptions o;
  o.form = Form::kParallel;
  const double loss = retnet::sequence_loss_and_gradients(c, w, kTokens, o, reference);
  for (const Form form : {Form::kChunkwise, Form::kRecurrent})
    for (const Index chunk : {1, 3, 9})
      for (const bool recompute : {false, true}) {
        o.form = form, o.chunk_size = chunk, o.recompute = recompute;
        EXPECT_NEAR(retnet::sequence_loss_and_gradients(c, w, kTokens, o, g), loss, 1e-13);
        EXPECT_LT(relative_difference(c, g, reference), 1e-10)
            << retnet::form_name(form) << " chunk " << chunk << " recompute " << recompute;
      }
}

TEST(ModelGradients, IgnoredTargetsAndCarriedState) {
  const ModelConfig c = tiny_config();
  const DenseModelWeights<double> w = DenseModelWeights<double>::random(c, 12);
  retnet::GradientOptions o;
  // Two sequences in one batch; the second's last three targets ignored = a shorter sequence.
  retnet::TokenMatrix inputs(2, 6), targets(2, 6);
  for (Index t = 0; t < 6; ++t) {
    inputs(0, t) = kTokens[t], targets(0, t) = kTokens[t + 1];
    inputs(1, t) = kTokens[t + 2], targets(1, t) = t < 3 ? kTokens[t + 3] : -100;
  }
  DenseModelWeights<double> g, g_short;
  g.allocate(c);
  auto state = retnet::zero_state<double>(c, 2);
  retnet::GradientWorkspace<double> ws;
  const auto loss = retnet::accumulate_gradients(c, w, inputs, targets, o, 1.0, state, ws, g);
  EXPECT_EQ(loss.count, 9);
  EXPECT_EQ(state.positions[0], 6);
  // The second sequence alone, cut to its counted targets, scaled the same way.
  g_short.allocate(c);
  retnet::TokenMatrix first(1, 6), first_targets(1, 6), second(1, 3), second_targets(1, 3);
  first = inputs.topRows(1), first_targets = targets.topRows(1);
  second = inputs.bottomRows(1).leftCols(3), second_targets = targets.bottomRows(1).leftCols(3);
  auto s1 = retnet::zero_state<double>(c, 1), s2 = retnet::zero_state<double>(c, 1);
  const auto a = retnet::accumulate_gradients(c, w, first, first_targets, o, 1.0, s1, ws, g_short);
  const auto b =
      retnet::accumulate_gradients(c, w, second, second_targets, o, 1.0, s2, ws, g_short);
  EXPECT_NEAR(loss.sum, a.sum + b.sum, 1e-12);
  EXPECT_LT(relative_difference(c, g, g_short), 1e-12);
  // A state carried from a first call: the second call's loss is the loss of the continuation.
  auto carried = retnet::zero_state<double>(c, 1);
  DenseModelWeights<double> scratch;
  scratch.allocate(c);
  retnet::TokenMatrix head = first.leftCols(3), head_targets = first_targets.leftCols(3);
  retnet::TokenMatrix tail = first.rightCols(3), tail_targets = first_targets.rightCols(3);
  const auto h =
      retnet::accumulate_gradients(c, w, head, head_targets, o, 1.0, carried, ws, scratch);
  const auto t =
      retnet::accumulate_gradients(c, w, tail, tail_targets, o, 1.0, carried, ws, scratch);
  EXPECT_NEAR(h.sum + t.sum, a.sum, 1e-12);
  EXPECT_EQ(carried.positions[0], 6);
}

TEST(OpGradients, DropoutMaskRateScaleAndKeys) {
  // 300 positions of 2 sequences x 400 columns of ones: the share dropped is the rate (binomial
  // sd 0.0008 here, bound 0.004), the rest scaled by 1 / (1 - rate).
  const retnet::Dropout dropout{0.2, 77};
  Matrix<double> x = Matrix<double>::Ones(2 * 300, 400);
  retnet::apply_dropout(dropout, 300, {0, 0}, x);
  const double dropped = double((x.array() == 0).count()) / double(x.size());
  EXPECT_NEAR(dropped, 0.2, 0.004);
  EXPECT_TRUE(((x.array() == 0) || (x.array() == 1.25)).all());
  // Two sequences at the same positions get different masks; so do two sites or seeds.
  EXPECT_GT((x.topRows(300).array() != x.bottomRows(300).array()).count(), 30000);
  Matrix<double> site = Matrix<double>::Ones(600, 400), seed = site;
  retnet::apply_dropout(dropout.at(1), 300, {0, 0}, site);
  retnet::apply_dropout(retnet::Dropout{0.2, 78}, 300, {0, 0}, seed);
  EXPECT_GT((site.array() != x.array()).count(), 60000);
  EXPECT_GT((seed.array() != x.array()).count(), 60000);
  // The mask follows the absolute position: positions 100..299 read as a later segment.
  Matrix<double> later = Matrix<double>::Ones(2 * 200, 400);
  retnet::apply_dropout(dropout, 200, {100, 100}, later);
  EXPECT_EQ(later.topRows(200), x.middleRows(100, 200));
  EXPECT_EQ(later.bottomRows(200), x.bottomRows(200));
  // Rate 0 leaves x alone; a rate of 1 or a wrong row count is refused.
  Matrix<double> same = Matrix<double>::Ones(4, 3);
  retnet::apply_dropout(retnet::Dropout{}, 4, {0}, same);
  EXPECT_EQ(same, Matrix<double>::Ones(4, 3));
  EXPECT_THROW(retnet::apply_dropout(retnet::Dropout{1.0, 1}, 4, {0}, same), retnet::Error);
  EXPECT_THROW(retnet::apply_dropout(dropout, 3, {0}, same), retnet::Error);
}

TEST(ModelGradients, DropoutMatchesFiniteDifferencesInEveryForm) {
  // With dropout the loss is that of the masked network, a fixed function of the weights for a
  // seed: its gradient against central differences of that loss, and the forms, chunk sizes
  // and recomputation agree because a mask depends on the position, not on the segment.
  const ModelConfig c = tiny_config();
  DenseModelWeights<double> w = DenseModelWeights<double>::random(c, 14), reference, g;
  retnet::GradientOptions o;
  o.form = Form::kParallel;
  o.dropout = {0.3, 5};
  const double loss = retnet::sequence_loss_and_gradients(c, w, kTokens, o, reference);
  retnet::GradientOptions plain = o;
  plain.dropout.rate = 0;
  EXPECT_GT(std::abs(loss - retnet::sequence_loss_and_gradients(c, w, kTokens, plain, g)), 1e-3);
  for (const Form form : {Form::kChunkwise, Form::kRecurrent})
    for (const Index chunk : {1, 3, 9})
      for (const bool recompute : {false, true}) {
        retnet::GradientOptions other = o;
        other.form = form, other.chunk_size = chunk, other.recompute = recompute;
        EXPECT_NEAR(retnet::sequence_loss_and_gradients(c, w, kTokens, other, g), loss, 1e-13);
        EXPECT_LT(relative_difference(c, g, reference), 1e-10)
            << retnet::form_name(form) << " chunk " << chunk << " recompute " << recompute;
      }
  std::vector<double*> grads;
  reference.visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>&) {
    grads.push_back(t.data());
  });
  o.form = Form::kChunkwise;
  size_t i = 0;
  w.visit(c, [&](const std::string& name, auto& t, const std::vector<int64_t>&) {
    const double worst = worst_difference(t.data(), grads[i++], t.size(), [&] {
      return retnet::sequence_loss_and_gradients(c, w, kTokens, o, g);
    });
    EXPECT_LT(worst, 1e-6) << name;
  });
}

TEST(ModelGradients, BadCallsAreRefused) {
  const ModelConfig c = tiny_config();
  const DenseModelWeights<double> w = DenseModelWeights<double>::random(c, 13);
  DenseModelWeights<double> g;
  EXPECT_THROW(retnet::sequence_loss_and_gradients(c, w, {3}, {}, g), retnet::Error);
  EXPECT_THROW(retnet::sequence_loss_and_gradients(c, w, {3, 11}, {}, g), retnet::Error);
  g.allocate(c);
  retnet::TokenMatrix inputs(1, 4), targets(1, 3);
  inputs.setZero(), targets.setZero();
  auto state = retnet::zero_state<double>(c, 1);
  retnet::GradientWorkspace<double> ws;
  EXPECT_THROW(retnet::accumulate_gradients(c, w, inputs, targets, {}, 1.0, state, ws, g),
               retnet::Error);
}

}  // namespace
