// Test helper: counts heap allocations of the executable that includes it (once), so that a
// test can check that a hot path allocates nothing once warm. Replacing the global operator
// new is allowed and only affects that test executable.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long long> g_allocations{0};
// Called through a volatile pointer: once GCC inlines the replaced operator delete it
// sees free() on memory from operator new and warns (-Wmismatched-new-delete), though
// the pair is consistent here.
void (*volatile g_free)(void*) = std::free;
}  // namespace

// Every unaligned form is replaced so that all of them pair with free(), also under
// sanitizers that intercept the library defaults.
namespace {
void* CountedMalloc(std::size_t size) noexcept {
  ++g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* CountedNew(std::size_t size) {
  if (void* p = CountedMalloc(size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) {
  return CountedNew(size);
}
void* operator new[](std::size_t size) {
  return CountedNew(size);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return CountedMalloc(size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return CountedMalloc(size);
}
void operator delete(void* p) noexcept {
  g_free(p);
}
void operator delete[](void* p) noexcept {
  g_free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  g_free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  g_free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  g_free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  g_free(p);
}
