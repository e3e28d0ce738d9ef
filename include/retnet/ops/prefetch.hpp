// How far ahead of its reads a product asks for the bytes of W, and into which cache. A product
// streams each panel of W once, front to back (ops/linear_weight.hpp), and asks for the bytes it
// will read next rather than waiting on the hardware prefetcher.
#pragma once

#include <cstdint>

#include "retnet/core/tensor.hpp"

namespace retnet {
namespace detail {

/// How far ahead of its reads a product asks for a panel's bytes. The hardware prefetcher alone
/// falls behind once a step does several rows' multiply-adds per byte it reads, so the products
/// ask for the bytes themselves.
constexpr Index kPrefetchBytes = 6144;

/// Asks for the `bytes` bytes at p + kPrefetchBytes, for a step that multiplies them by kRows
/// rows of x: one row waits on nothing but the bytes, so they are asked into L1; several rows
/// have multiply-adds to overlap with the stream, and a prefetch into L1 would hold one of the
/// few L1 fill buffers that their own loads need, so the bytes are asked into L2. Past the end
/// of W this is harmless: a prefetch never faults, and the address is computed as an integer.
template <int kRows = 1>
inline void prefetch_ahead(const void* p, Index bytes) {
  constexpr int kLocality = kRows == 1 ? 3 : 2;  // prefetcht0 : prefetcht1
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes;
  for (Index b = 0; b < bytes; b += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + b), 0, kLocality);
}

}  // namespace detail
}  // namespace retnet
