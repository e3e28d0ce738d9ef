// The three retention forms against a brute-force reference and against each other.
#include <gtest/gtest.h>

#include <limits>
#include <tuple>

#include "expect_error.hpp"
#include "retention_reference.hpp"
#include "retnet/retnet.hpp"

using namespace retnet;
using retnet::testing::brute_force_retention;
using retnet::testing::expect_error;
using retnet::testing::random_tensor;
using retnet::testing::relative_error;

template <typename Scalar>
struct Tolerance;
template <>
struct Tolerance<double> {
  static constexpr double value = 1e-12;
};
template <>
struct Tolerance<float> {
  static constexpr double value = 1e-5;
};

template <typename Scalar>
class RetentionForms : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RetentionForms, Scalars);

// Distinct decays per head, including gamma = 1 (no decay) and a fast one.
template <typename Scalar>
std::vector<Scalar> test_decays(Index heads) {
  const std::vector<Scalar> all = {Scalar(0.96875), Scalar(0.5), Scalar(1), Scalar(0.99)};
  return std::vector<Scalar>(all.begin(), all.begin() + heads);
}

// Positions [from, from + len) of a [batch, heads, time, ·] tensor.
template <typename Scalar>
Tensor4<Scalar> slice(const Tensor4<Scalar>& t, Index from, Index len) {
  Tensor4<Scalar> s =
      t.slice(Eigen::array<Index, 4>{0, 0, from, 0},
              Eigen::array<Index, 4>{t.dimension(0), t.dimension(1), len, t.dimension(3)});
  return s;
}

TYPED_TEST(RetentionForms, EveryFormMatchesBruteForceOverTheGrid) {
  using Scalar = TypeParam;
  const double tol = Tolerance<Scalar>::value;
  std::mt19937_64 rng(42);
  const Index dk = 4, dv = 6;
  for (Index batch : {1, 3})
    for (Index heads : {1, 2, 4})
      for (Index time : {1, 2, 7, 64, 129}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + " heads " + std::to_string(heads) + " T " +
                     std::to_string(time));
        const auto q = random_tensor<Scalar>(batch, heads, time, dk, rng);
        const auto k = random_tensor<Scalar>(batch, heads, time, dk, rng);
        const auto v = random_tensor<Scalar>(batch, heads, time, dv, rng);
        const auto decays = test_decays<Scalar>(heads);
        Tensor4<Scalar> ref_out, ref_state, none;
        brute_force_retention(q, k, v, decays, none, ref_out, ref_state);

        RetentionState<Scalar> parallel_state, recurrent_state;
        const auto parallel = parallel_retention(q, k, v, decays, &parallel_state);
        const auto recurrent = recurrent_retention(q, k, v, decays, &recurrent_state);
        EXPECT_LE(relative_error(parallel, ref_out), tol);
        EXPECT_LE(relative_error(parallel_state, ref_state), tol);
        EXPECT_LE(relative_error(recurrent, ref_out), tol);
        EXPECT_LE(relative_error(recurrent_state, ref_state), tol);
        EXPECT_LE(relative_error(recurrent, parallel), tol);
        for (Index chunk : {Index(1), Index(3), Index(16), time, time + 5}) {
          SCOPED_TRACE("chunk " + std::to_string(chunk));
          RetentionState<Scalar> chunk_state;
          const auto chunkwise = chunkwise_retention(q, k, v, decays, chunk, &chunk_state);
          EXPECT_LE(relative_error(chunkwise, ref_out), tol);
          EXPECT_LE(relative_error(chunk_state, ref_state), tol);
          EXPECT_LE(relative_error(chunkwise, parallel), tol);
          EXPECT_LE(relative_error(chunk_state, recurrent_state), tol);
        }
      }
}

TYPED_TEST(RetentionForms, SingleStepsEqualTheSequenceForm) {
  using Scalar = TypeParam;
  std::mt19937_64 rng(7);
  const Index batch = 2, heads = 3, time = 9, dk = 4, dv = 5;
  const auto q = random_tensor<Scalar>(batch, heads, time, dk, rng);
  const auto k = random_tensor<Scalar>(batch, heads, time, dk, rng);
  const auto v = random_tensor<Scalar>(batch, heads, time, dv, rng);
  const auto decays = default_decays<Scalar>(heads);
  RetentionState<Scalar> seq_state, step_state;
  const auto sequence = recurrent_retention(q, k, v, decays, &seq_state);
  Tensor3<Scalar> qs(batch, heads, dk), ks(batch, heads, dk), vs(batch, heads, dv), out;
  Tensor4<Scalar> stepped(batch, heads, time, dv);
  for (Index n = 0; n < time; ++n) {
    for (Index b = 0; b < batch; ++b)
      for (Index h = 0; h < heads; ++h) {
        for (Index i = 0; i < dk; ++i) qs(b, h, i) = q(b, h, n, i), ks(b, h, i) = k(b, h, n, i);
        for (Index e = 0; e < dv; ++e) vs(b, h, e) = v(b, h, n, e);
      }
    recurrent_retention_step(qs, ks, vs, decays, step_state, out);
    for (Index b = 0; b < batch; ++b)
      for (Index h = 0; h < heads; ++h)
        for (Index e = 0; e < dv; ++e) stepped(b, h, n, e) = out(b, h, e);
  }
  EXPECT_LE(relative_error(stepped, sequence), Tolerance<Scalar>::value);
  EXPECT_LE(relative_error(step_state, seq_state), Tolerance<Scalar>::value);
}

// Split a sequence at position p: the prefix in one form, the rest in another, with the
// prefix's state handed over. The joined output must equal the full brute-force run.
TYPED_TEST(RetentionForms, PrefixStateContinuesInAnyForm) {
  using Scalar = TypeParam;
  const double tol = Tolerance<Scalar>::value;
  std::mt19937_64 rng(3);
  const Index batch = 2, heads = 4, time = 37, dk = 6, dv = 3;
  const auto q = random_tensor<Scalar>(batch, heads, time, dk, rng);
  const auto k = random_tensor<Scalar>(batch, heads, time, dk, rng);
  const auto v = random_tensor<Scalar>(batch, heads, time, dv, rng);
  const auto decays = test_decays<Scalar>(heads);
  Tensor4<Scalar> ref_out, ref_state, none;
  brute_force_retention(q, k, v, decays, none, ref_out, ref_state);

  enum Form { kParallel, kRecurrent, kChunkwise };
  auto run = [&](Form form, const Tensor4<Scalar>& qq, const Tensor4<Scalar>& kk,
                 const Tensor4<Scalar>& vv, RetentionState<Scalar>& state) {
    switch (form) {
      case kParallel:  // no initial state: only used for the prefix
        return parallel_retention(qq, kk, vv, decays, &state);
      case kRecurrent:
        return recurrent_retention(qq, kk, vv, decays, &state);
      default:
        return chunkwise_retention(qq, kk, vv, decays, Index(5), &state);
    }
  };
  for (Index split : {1, 16, 36})
    for (Form first : {kParallel, kRecurrent, kChunkwise})
      for (Form second : {kRecurrent, kChunkwise}) {
        SCOPED_TRACE("split " + std::to_string(split) + " forms " + std::to_string(first) + "->" +
                     std::to_string(second));
        RetentionState<Scalar> state;
        const auto head =
            run(first, slice(q, 0, split), slice(k, 0, split), slice(v, 0, split), state);
        const Index rest = time - split;
        const auto tail =
            run(second, slice(q, split, rest), slice(k, split, rest), slice(v, split, rest), state);
        EXPECT_LE(relative_error(head, slice(ref_out, 0, split)), tol);
        EXPECT_LE(relative_error(tail, slice(ref_out, split, rest)), tol);
        EXPECT_LE(relative_error(state, ref_state), tol);
      }
}

TYPED_TEST(RetentionForms, InitialStateMatchesBruteForce) {
  using Scalar = TypeParam;
  std::mt19937_64 rng(11);
  const auto q = random_tensor<Scalar>(1, 2, 13, 4, rng);
  const auto k = random_tensor<Scalar>(1, 2, 13, 4, rng);
  const auto v = random_tensor<Scalar>(1, 2, 13, 7, rng);
  const auto initial = random_tensor<Scalar>(1, 2, 4, 7, rng);
  const auto decays = test_decays<Scalar>(2);
  Tensor4<Scalar> ref_out, ref_state;
  brute_force_retention(q, k, v, decays, initial, ref_out, ref_state);
  RetentionState<Scalar> s1 = initial, s2 = initial;
  EXPECT_LE(relative_error(recurrent_retention(q, k, v, decays, &s1), ref_out),
            Tolerance<Scalar>::value);
  EXPECT_LE(relative_error(chunkwise_retention(q, k, v, decays, 4, &s2), ref_out),
            Tolerance<Scalar>::value);
  EXPECT_LE(relative_error(s1, ref_state), Tolerance<Scalar>::value);
  EXPECT_LE(relative_error(s2, ref_state), Tolerance<Scalar>::value);
}

// The deferred fold (kernels/deferred_recurrent_retention.hpp) against brute force: outputs read
// in pieces of every length (so folds fall anywhere in a call), the state once folded, and a
// chunkwise continuation that folds the pending pairs first.
TYPED_TEST(RetentionForms, DeferredFoldMatchesBruteForce) {
  using Scalar = TypeParam;
  const double tol = Tolerance<Scalar>::value;
  std::mt19937_64 rng(5);
  const Index batch = 2, heads = 4, time = 41, dk = 5, dv = 7;
  const auto q = random_tensor<Scalar>(batch, heads, time, dk, rng);
  const auto k = random_tensor<Scalar>(batch, heads, time, dk, rng);
  const auto v = random_tensor<Scalar>(batch, heads, time, dv, rng);
  const auto initial = random_tensor<Scalar>(batch, heads, dk, dv, rng);
  const auto decays = test_decays<Scalar>(heads);
  Tensor4<Scalar> ref_out, ref_state;
  brute_force_retention(q, k, v, decays, initial, ref_out, ref_state);
  for (Index capacity : {2, 5, 16})
    for (Index piece : {1, 3, 41}) {
      SCOPED_TRACE("capacity " + std::to_string(capacity) + " piece " + std::to_string(piece));
      RetentionState<Scalar> state = initial;
      PendingPairs<Scalar> pending(batch, heads, capacity, dk, dv, decays);
      Tensor4<Scalar> out;
      for (Index start = 0; start < time; start += piece) {
        const Index len = std::min(piece, time - start);
        deferred_recurrent_retention(slice(q, start, len), slice(k, start, len),
                                     slice(v, start, len), decays, state, pending, out);
        EXPECT_LE(relative_error(out, slice(ref_out, start, len)), tol) << "at " << start;
      }
      EXPECT_EQ(pending.count[0], time % capacity);
      EXPECT_EQ(pending.count[1], time % capacity);
      if (time % capacity != 0) {
        EXPECT_GT(relative_error(state, ref_state), 100 * tol);
      }
      RetentionState<Scalar> folded = state;
      PendingPairs<Scalar> copy = pending;
      fold_pending(folded, copy);
      EXPECT_TRUE(copy.empty());
      EXPECT_LE(relative_error(folded, ref_state), tol);

      // The first 30 positions deferred, the rest chunkwise: the fold happens inside retention().
      state = initial;
      pending = PendingPairs<Scalar>(batch, heads, capacity, dk, dv, decays);
      retention(Form::kRecurrent, slice(q, 0, 30), slice(k, 0, 30), slice(v, 0, 30), decays, state,
                &pending, out);
      retention(Form::kChunkwise, slice(q, 30, 11), slice(k, 30, 11), slice(v, 30, 11), decays,
                state, &pending, out);
      EXPECT_TRUE(pending.empty());
      EXPECT_LE(relative_error(out, slice(ref_out, 30, 11)), tol);
      EXPECT_LE(relative_error(state, ref_state), tol);
    }
}

// --- invalid arguments: an InvalidArgument whose message names the argument ---

TEST(RetentionArguments, RejectsMismatchedShapes) {
  Tensor4<double> q(1, 2, 5, 4), k(1, 2, 5, 3), v(1, 2, 5, 6), v_short(1, 2, 4, 6);
  q.setZero(), k.setZero(), v.setZero(), v_short.setZero();
  const auto decays = default_decays<double>(2);
  expect_error<InvalidArgument>([&] { parallel_retention(q, k, v, decays); }, {"k has shape"});
  expect_error<InvalidArgument>([&] { recurrent_retention(q, k, v, decays); }, {"k has shape"});
  expect_error<InvalidArgument>([&] { chunkwise_retention(q, k, v, decays, 2); }, {"k has shape"});
  expect_error<InvalidArgument>([&] { parallel_retention(q, q, v_short, decays); },
                                {"v has shape"});
  RetentionState<double> wrong(1, 2, 4, 5);
  wrong.setZero();
  expect_error<InvalidArgument>([&] { recurrent_retention(q, q, v, decays, &wrong); },
                                {"state has shape"});
  expect_error<InvalidArgument>([&] { chunkwise_retention(q, q, v, decays, 2, &wrong); },
                                {"state has shape"});
  expect_error<InvalidArgument>([&] { parallel_retention(q, q, v, default_decays<double>(3)); },
                                {"decays has 3"});
}

TEST(RetentionArguments, RejectsChunkSizeZero) {
  Tensor4<float> q(1, 1, 3, 2), v(1, 1, 3, 2);
  q.setZero(), v.setZero();
  expect_error<InvalidArgument>([&] { chunkwise_retention(q, q, v, {0.5f}, 0); }, {"chunk_size"});
}

TEST(RetentionArguments, RejectsDecaysOutsideTheUnitInterval) {
  Tensor4<double> q(1, 1, 3, 2), v(1, 1, 3, 2);
  q.setZero(), v.setZero();
  for (double bad : {0.0, -0.5, 1.0000001, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(bad);
    expect_error<InvalidArgument>([&] { parallel_retention(q, q, v, {bad}); }, {"decays[0]"});
    expect_error<InvalidArgument>([&] { recurrent_retention(q, q, v, {bad}); }, {"decays[0]"});
    expect_error<InvalidArgument>([&] { chunkwise_retention(q, q, v, {bad}, 2); }, {"decays[0]"});
  }
  Tensor3<double> q3(1, 1, 2), v3(1, 1, 2), out;
  q3.setZero(), v3.setZero();
  RetentionState<double> state;
  expect_error<InvalidArgument>([&] { recurrent_retention_step(q3, q3, v3, {2.0}, state, out); },
                                {"decays[0]"});
}

TEST(RetentionArguments, RejectsPendingPairsThatDoNotFit) {
  const auto decays = default_decays<double>(2);
  expect_error<InvalidArgument>([&] { PendingPairs<double>(1, 2, 1, 4, 6, decays); },
                                {"capacity 1 outside [2, 256]"});
  expect_error<InvalidArgument>([&] { PendingPairs<double>(1, 2, 257, 4, 6, decays); },
                                {"capacity 257"});
  Tensor4<double> q(1, 2, 3, 4), v(1, 2, 3, 6), out;
  q.setZero(), v.setZero();
  RetentionState<double> state;
  PendingPairs<double> narrow(1, 2, 4, 4, 5, decays);
  expect_error<InvalidArgument>(
      [&] { deferred_recurrent_retention(q, q, v, decays, state, narrow, out); },
      {"pending pairs of shape", "do not fit"});
  PendingPairs<double> other(1, 2, 4, 4, 6, default_decays<double>(2));
  other.decays[1] = 0.5;
  expect_error<InvalidArgument>(
      [&] { deferred_recurrent_retention(q, q, v, decays, state, other, out); }, {"other decays"});
}
