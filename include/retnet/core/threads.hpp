// The number of threads the library uses: OpenMP loops over batch entries and heads in the
// kernels, and Eigen's matrix products (which use OpenMP too when it is enabled).
#pragma once

#include <Eigen/Core>
#include <exception>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"

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

/// body(i) for every i in [0, n), spread over the threads in equal shares (static schedule: with
/// n = threads, item t runs on thread t) when OpenMP is on.
/// An exception cannot leave an OpenMP region (it would terminate the program), so the first one
/// a body throws (std::bad_alloc for a form too large for memory, say) is kept and rethrown here.
template <typename Body>
void parallel_for(Index n, Body&& body) {
  if (n == 1) {  // no team of threads to wake and wait for
    body(Index(0));
    return;
  }
  std::exception_ptr error;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (Index i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
#ifdef _OPENMP
#pragma omp critical(retnet_parallel_for_error)
#endif
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace retnet
