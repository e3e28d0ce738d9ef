// The number of threads the library uses: OpenMP loops over batch entries and heads in the
// kernels, and Eigen's matrix products (which use OpenMP too when it is enabled).
#pragma once

#include <Eigen/Core>

#include "retnet/core/error.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace retnet {

/// Sets the threads for everything that follows (n >= 1). Without OpenMP, only 1 is possible
/// and larger values are accepted but have no effect.
inline void set_num_threads(int n) {
  RETNET_REQUIRE(n >= 1, "set_num_threads: threads must be >= 1, found " + std::to_string(n));
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

inline int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace retnet
