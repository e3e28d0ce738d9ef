// The gradients of the three forms of retention (kernels/*_backward.hpp): against central
// finite differences of the forward kernels, and against each other, in double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <retnet/core/threads.hpp>
#include <retnet/kernels.hpp>
#include <retnet/kernels/retention_backward.hpp>
#include <string>

#include "pool_ignores_load.hpp"

namespace {

using retnet::Form;
using retnet::Index;
using retnet::RetentionState;
using retnet::Tensor4;

Tensor4<double> random_tensor(Index a, Index b, Index c, Index d, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor4<double> t(a, b, c, d);
  for (Index i = 0; i < t.size(); ++i) t.data()[i] = normal(rng);
  return t;
}

double dot(const Tensor4<double>& a, const Tensor4<double>& b) {
  double s = 0;
  for (Index i = 0; i < a.size(); ++i) s += a.data()[i] * b.data()[i];
  return s;
}

double max_abs(const Tensor4<double>& t) {
  double m = 0;
  for (Index i = 0; i < t.size(); ++i) m = std::max(m, std::abs(t.data()[i]));
  return m;
}

/// max |a - b| / max |b|.
double relative_difference(const Tensor4<double>& a, const Tensor4<double>& b) {
  double m = 0;
  for (Index i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a.data()[i] - b.data()[i]));
  return m / std::max(max_abs(b), 1e-300);
}

/// One retention problem: inputs, a start state and the gradients of a scalar loss
///     L = <d_out, out> + <d_final, S_final>
/// with respect to the outputs, so that dL/d(input) is what the backward returns.
struct Problem {
  Tensor4<double> q, k, v, initial, d_out, d_final;
  std::vector<double> decays;

  Problem(Index batch, Index heads, Index time, Index dk, Index dv, bool with_state,
          uint32_t seed) {
    std::mt19937 rng(seed);
    q = random_tensor(batch, heads, time, dk, rng);
    k = random_tensor(batch, heads, time, dk, rng);
    v = random_tensor(batch, heads, time, dv, rng);
    d_out = random_tensor(batch, heads, time, dv, rng);
    d_final = random_tensor(batch, heads, dk, dv, rng);
    initial = with_state ? random_tensor(batch, heads, dk, dv, rng) : Tensor4<double>();
    const double all[] = {0.5, 1.0, 0.9, 0.97};  // includes gamma = 1 and a fast decay
    for (Index h = 0; h < heads; ++h) decays.push_back(all[h % 4]);
  }

  /// L of the chunkwise forward (chunk = T: the function every form computes).
  double loss() const {
    RetentionState<double> state = initial;
    Tensor4<double> out;
    retnet::chunkwise_retention(q, k, v, decays, std::max<Index>(q.dimension(2), 1), &state, out);
    return dot(d_out, out) + dot(d_final, state);
  }

  struct Gradients {
    Tensor4<double> dq, dk, dv, d_initial;
  };
  Gradients backward(Form form, Index chunk) const {
    Gradients g;
    retnet::retention_backward(form, q, k, v, decays, chunk, initial, d_out, d_final, g.dq, g.dk,
                               g.dv, g.d_initial);
    return g;
  }
};

/// Central differences of p.loss() along every entry of `x` (a member of p). Computed once per
/// problem and compared against every form (the loss is the same function for all of them).
/// The thousands of tiny forwards run on one thread: an OpenMP team on a busy machine makes each
/// one wait for a descheduled thread (measured 0.3 s alone, 25 s with the cores shared).
Tensor4<double> finite_differences(Problem& p, Tensor4<double>& x) {
  const int threads = retnet::num_threads();
  retnet::set_num_threads(1);
  const double h = 1e-5;
  Tensor4<double> numeric(x.dimensions());
  for (Index i = 0; i < x.size(); ++i) {
    const double saved = x.data()[i];
    x.data()[i] = saved + h;
    const double plus = p.loss();
    x.data()[i] = saved - h;
    const double minus = p.loss();
    x.data()[i] = saved;
    numeric.data()[i] = (plus - minus) / (2 * h);
  }
  retnet::set_num_threads(threads);
  return numeric;
}

void expect_close(const Tensor4<double>& numeric, const Tensor4<double>& grad,
                  const std::string& what) {
  ASSERT_EQ(numeric.size(), grad.size()) << what;
  double worst = 0;
  for (Index i = 0; i < numeric.size(); ++i) {
    const double n = numeric.data()[i];
    worst = std::max(worst, std::abs(n - grad.data()[i]) / (1.0 + std::abs(n)));
  }
  EXPECT_LT(worst, 1e-7) << what;
}

TEST(RetentionGradients, EachFormMatchesFiniteDifferences) {
  for (const bool with_state : {false, true}) {
    Problem p(2, 3, 9, 4, 5, with_state, 7);
    const Tensor4<double> dq = finite_differences(p, p.q);
    const Tensor4<double> dk = finite_differences(p, p.k);
    const Tensor4<double> dv = finite_differences(p, p.v);
    const Tensor4<double> d_initial =
        with_state ? finite_differences(p, p.initial) : Tensor4<double>();
    for (const Form form : {Form::kParallel, Form::kChunkwise, Form::kRecurrent}) {
      if (form == Form::kParallel && with_state) continue;  // the parallel form starts at zero
      const auto g = p.backward(form, 4);
      const std::string name = std::string(retnet::form_name(form)) + (with_state ? " +state" : "");
      expect_close(dq, g.dq, name + " dq");
      expect_close(dk, g.dk, name + " dk");
      expect_close(dv, g.dv, name + " dv");
      if (with_state) expect_close(d_initial, g.d_initial, name + " dS0");
    }
  }
}

TEST(RetentionGradients, TheFormsAgreeForEveryChunkSize) {
  for (const bool with_state : {false, true}) {
    const Index time = 70;
    const Problem p(1, 4, time, 6, 3, with_state, 11);
    const auto reference = p.backward(Form::kRecurrent, 0);
    for (const Index chunk : {Index(1), Index(7), Index(64), time}) {
      const auto g = p.backward(Form::kChunkwise, chunk);
      const std::string name = "chunk " + std::to_string(chunk);
      EXPECT_LT(relative_difference(g.dq, reference.dq), 1e-10) << name;
      EXPECT_LT(relative_difference(g.dk, reference.dk), 1e-10) << name;
      EXPECT_LT(relative_difference(g.dv, reference.dv), 1e-10) << name;
      EXPECT_LT(relative_difference(g.d_initial, reference.d_initial), 1e-10) << name;
    }
    if (with_state) continue;
    const auto g = p.backward(Form::kParallel, 0);
    EXPECT_LT(relative_difference(g.dq, reference.dq), 1e-10);
    EXPECT_LT(relative_difference(g.dk, reference.dk), 1e-10);
    EXPECT_LT(relative_difference(g.dv, reference.dv), 1e-10);
    EXPECT_LT(relative_difference(g.d_initial, reference.d_initial), 1e-10);
  }
}

TEST(RetentionGradients, ShortSequences) {
  for (const Index time : {0, 1}) {
    Problem p(1, 2, time, 2, 3, true, 3);
    const auto chunkwise = p.backward(Form::kChunkwise, 5);
    const auto recurrent = p.backward(Form::kRecurrent, 0);
    // With no positions, the start state's gradient is gamma^0 · d_final = d_final.
    if (time == 0) {
      EXPECT_LT(relative_difference(recurrent.d_initial, p.d_final), 1e-15);
    }
    EXPECT_LT(relative_difference(chunkwise.d_initial, recurrent.d_initial), 1e-12);
    if (time == 1) {
      expect_close(finite_differences(p, p.k), recurrent.dk, "T=1 dk");
    }
  }
}

TEST(RetentionGradients, FloatAgreesWithDouble) {
  const Problem p(1, 2, 20, 4, 4, true, 5);
  const auto reference = p.backward(Form::kChunkwise, 8);
  const auto to_float = [](const Tensor4<double>& t) -> Tensor4<float> { return t.cast<float>(); };
  std::vector<float> decays(p.decays.begin(), p.decays.end());
  Tensor4<float> dq, dk, dv, d_initial;
  retnet::retention_backward(Form::kChunkwise, to_float(p.q), to_float(p.k), to_float(p.v), decays,
                             8, to_float(p.initial), to_float(p.d_out), to_float(p.d_final), dq, dk,
                             dv, d_initial);
  EXPECT_LT(relative_difference(dq.cast<double>(), reference.dq), 1e-5);
  EXPECT_LT(relative_difference(dv.cast<double>(), reference.dv), 1e-5);
}

TEST(RetentionGradients, WrongShapesAreNamed) {
  const Problem p(1, 2, 5, 2, 3, false, 1);
  Tensor4<double> dq, dk, dv, d_initial, bad(1, 2, 5, 4);
  try {
    retnet::retention_backward(Form::kChunkwise, p.q, p.k, p.v, p.decays, 2, p.initial, bad,
                               p.d_final, dq, dk, dv, d_initial);
    FAIL() << "a d_out of the wrong shape was accepted";
  } catch (const retnet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_out has shape [1, 2, 5, 4]"), std::string::npos)
        << e.what();
  }
  Tensor4<double> bad_state(1, 2, 3, 3);
  EXPECT_THROW(retnet::retention_backward(Form::kRecurrent, p.q, p.k, p.v, p.decays, 0, p.initial,
                                          p.d_out, bad_state, dq, dk, dv, d_initial),
               retnet::Error);
}

}  // namespace
