// The one size limit the library states for what it allocates from user-controlled numbers
// (config sizes, batch, sequence length): no single buffer may exceed the machine's physical
// memory. Asking for more is refused before allocating, with a message naming what asked.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include "retnet/core/error.hpp"

namespace retnet {

/// Bytes of physical memory on this machine (sysconf); 2^40 where the system does not say.
inline double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? double(pages) * double(page_size) : double(int64_t(1) << 40);
}

/// Throws InvalidArgument "what() needs N MiB, more than this machine's M MiB of memory" when
/// `bytes` (computed in double, so that it cannot overflow) exceeds physical memory. `what` is
/// called only then, so that a check on the decoding path allocates nothing.
template <typename What>
void require_fits_in_memory(double bytes, What&& what) {
  const double limit = physical_memory_bytes();
  if (!(bytes <= limit))
    throw InvalidArgument(std::string(what()) + " needs " +
                          std::to_string(int64_t(bytes / (1 << 20))) +
                          " MiB, more than this machine's " +
                          std::to_string(int64_t(limit / (1 << 20))) + " MiB of memory");
}

}  // namespace retnet
