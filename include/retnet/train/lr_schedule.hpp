// The learning rate of each step: a linear warmup from lr/warmup to lr over the first `warmup`
// steps, then a cosine decay from lr to min_lr over the remaining ones (reaching min_lr at the
// last step).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace retnet {

struct LrSchedule {
  double lr = 1e-3;      // the peak, reached at the end of the warmup
  double min_lr = 1e-4;  // the floor of the cosine, reached at the last step
  int64_t warmup = 0;    // steps of linear warmup
  int64_t steps = 1;     // the run's total number of steps

  /// The rate of step `step` (0-based).
  double at(int64_t step) const {
    if (step < warmup) return lr * double(step + 1) / double(warmup);
    const int64_t decay_steps = std::max<int64_t>(1, steps - warmup - 1);
    const double progress = std::min(1.0, double(step - warmup) / double(decay_steps));
    const double pi = 3.14159265358979323846;
    return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(pi * progress));
  }
};

}  // namespace retnet
