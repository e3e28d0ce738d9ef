// The weights a new model starts training from (`retnet train --config`): every matrix drawn
// from N(0, 1/in) (in = its number of columns, so that y = x Wᵀ keeps the scale of x; the
// embedding [vocab, d] has std 1/sqrt(d)), every norm weight 1 and every bias 0. Seeded: one
// seed gives the same weights on every machine (std::mt19937_64 and a Box–Muller transform of
// our own, since std::normal_distribution differs between standard libraries).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "retnet/model/weights.hpp"

namespace retnet {

template <typename Scalar>
DenseModelWeights<Scalar> initial_weights(const ModelConfig& c, uint64_t seed) {
  DenseModelWeights<Scalar> w;
  w.allocate(c);  // zeros: the biases stay so
  std::mt19937_64 rng(seed);
  const double two_pi = 6.28318530717958647692, unit = 1.0 / 18446744073709551616.0;
  const auto normal = [&] {  // Box–Muller on two uniforms in (0, 1]
    const double u1 = (double(rng()) + 1.0) * unit, u2 = double(rng()) * unit;
    return std::sqrt(-2 * std::log(u1)) * std::cos(two_pi * u2);
  };
  w.visit(c, [&](const std::string& name, auto& t, const std::vector<int64_t>& shape) {
    if (shape.size() == 2) {
      const double stdev = 1.0 / std::sqrt(double(shape[1]));
      for (Index i = 0; i < t.size(); ++i) t.data()[i] = static_cast<Scalar>(stdev * normal());
    } else if (name.find("bias") == std::string::npos) {
      t.setOnes();  // a norm's weight
    }
  });
  return w;
}

}  // namespace retnet
