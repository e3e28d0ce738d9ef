// SplitMix64 (Steele, Lea and Flood 2014): the one integer mixer behind every seeded stream of
// the library (data offsets, dropout masks, the sampler's seeding, weight fingerprints). Fully
// specified, so a seed means the same numbers on every machine and standard library.
#pragma once

#include <cstdint>

namespace retnet {

/// SplitMix64's finaliser: a bijection of 64-bit words whose outputs look independent even for
/// inputs that differ in one bit.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// SplitMix64's generator: advances a 64-bit state (any value, 0 included) and returns the next
/// number of its stream.
inline uint64_t splitmix64(uint64_t& state) {
  return mix64(state += 0x9e3779b97f4a7c15ull);
}

}  // namespace retnet
