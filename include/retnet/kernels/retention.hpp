// The three forms of retention. They compute the same function (docs/NUMERICS.md#retention)
// and share one state, so a sequence can be split between them at any position.
#pragma once

#include <algorithm>

#include "retnet/kernels/chunkwise_retention.hpp"
#include "retnet/kernels/deferred_recurrent_retention.hpp"
#include "retnet/kernels/parallel_retention.hpp"
#include "retnet/kernels/recurrent_retention.hpp"
#include "retnet/kernels/retention_common.hpp"

namespace retnet {

enum class Form { kParallel, kChunkwise, kRecurrent };

inline const char* form_name(Form f) {
  return f == Form::kParallel ? "parallel" : f == Form::kChunkwise ? "chunkwise" : "recurrent";
}

/// out = retention(q, k, v) in `form`, from `state` (zero when empty) to the state after the last
/// position. The parallel form starts from zero only; the chunkwise form reads all T positions as
/// one chunk, since the caller has already cut the sequence into segments of its choosing.
template <typename Scalar>
void retention(Form form, const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
               const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
               RetentionState<Scalar>& state, Tensor4<Scalar>& out) {
  switch (form) {
    case Form::kParallel:
      RETNET_REQUIRE(std::all_of(state.data(), state.data() + state.size(),
                                 [](Scalar s) { return s == Scalar(0); }),
                     "retention: the parallel form starts from an empty state; use the chunkwise "
                     "or recurrent form to continue a sequence");
      parallel_retention(q, k, v, decays, &state, out);
      break;
    case Form::kChunkwise:
      chunkwise_retention(q, k, v, decays, std::max<Index>(q.dimension(2), 1), &state, out);
      break;
    case Form::kRecurrent:
      recurrent_retention(q, k, v, decays, &state, out);
      break;
  }
}

/// As above for a state with a deferred fold (`pending` may be null: none): the recurrent form
/// adds to the pending pairs; the other forms fold them into `state` first.
template <typename Scalar>
void retention(Form form, const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
               const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
               RetentionState<Scalar>& state, PendingPairs<Scalar>* pending, Tensor4<Scalar>& out) {
  if (!pending) return retention(form, q, k, v, decays, state, out);
  if (form == Form::kRecurrent)
    return deferred_recurrent_retention(q, k, v, decays, state, *pending, out);
  if (!pending->empty()) fold_pending(state, *pending);
  retention(form, q, k, v, decays, state, out);
}

}  // namespace retnet
