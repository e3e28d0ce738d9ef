// Next-token cross-entropy over rows of logits, in nats:
//     loss_r = log Σ_j exp(z_rj) - z_r,target        (computed in double, max subtracted)
//     d loss_r / d z_r = softmax(z_r) - onehot(target)
// Rows whose target is the ignore id are neither counted nor given a gradient.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"

namespace retnet {

/// A sum of per-token losses and how many tokens it counts.
struct LossSum {
  double sum = 0;
  int64_t count = 0;
  double mean() const { return count ? sum / double(count) : 0.0; }
};

/// Σ over rows r with targets[r] != ignore_id of loss_r, and their number. If dlogits is given it
/// is written with grad_scale · (softmax - onehot) on counted rows and 0 on ignored ones. A target
/// outside [0, vocab) that is not ignore_id is an error naming the row and the id.
template <typename Scalar>
LossSum cross_entropy(const Matrix<Scalar>& logits, const int32_t* targets, int32_t ignore_id,
                      Scalar grad_scale, Matrix<Scalar>* dlogits) {
  const Index rows = logits.rows(), vocab = logits.cols();
  for (Index r = 0; r < rows; ++r)
    RETNET_REQUIRE(targets[r] == ignore_id || (targets[r] >= 0 && targets[r] < vocab),
                   "cross_entropy: target " + std::to_string(targets[r]) + " of row " +
                       std::to_string(r) + " is outside [0, " + std::to_string(vocab) + ")");
  if (dlogits) dlogits->resize(rows, vocab);
  std::vector<double> losses(static_cast<size_t>(rows), 0.0);
  parallel_for(rows, [&](Index r) {
    if (targets[r] == ignore_id) {
      if (dlogits) dlogits->row(r).setZero();
      return;
    }
    const auto z = logits.row(r);
    const double max = double(z.maxCoeff());
    double sum = 0;
    for (Index j = 0; j < vocab; ++j) sum += std::exp(double(z(j)) - max);
    losses[static_cast<size_t>(r)] = max + std::log(sum) - double(z(targets[r]));
    if (!dlogits) return;
    auto d = dlogits->row(r);
    for (Index j = 0; j < vocab; ++j)
      d(j) = static_cast<Scalar>(double(grad_scale) * std::exp(double(z(j)) - max) / sum);
    d(targets[r]) -= grad_scale;
  });
  LossSum total;
  for (Index r = 0; r < rows; ++r)
    if (targets[r] != ignore_id) total.sum += losses[static_cast<size_t>(r)], ++total.count;
  return total;
}

/// The loss alone.
template <typename Scalar>
LossSum cross_entropy(const Matrix<Scalar>& logits, const int32_t* targets, int32_t ignore_id) {
  return cross_entropy<Scalar>(logits, targets, ignore_id, Scalar(0), nullptr);
}

}  // namespace retnet
