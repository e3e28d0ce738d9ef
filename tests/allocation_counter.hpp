// Test helper: counts heap allocations of the executable that includes it (once), so that a
// test can check that a hot path allocates nothing once warm.
//
// Two kinds of allocation are counted in g_allocations:
// - operator new in every form (std containers, std::string, ...): the global operators are
//   replaced here, which is allowed and only affects this test executable;
// - the C allocation functions (malloc, calloc, realloc, aligned_alloc, posix_memalign,
//   memalign): Eigen allocates its matrices and tensors with std::malloc (and std::realloc for
//   conservativeResize), which operator new never sees. tests/CMakeLists.txt links every test
//   that includes this header with `-Wl,--wrap=malloc,...`: the linker sends each call to
//   malloc from this executable's own objects (the header-only library included) to
//   __wrap_malloc below, which counts and forwards to the real malloc (__real_malloc). Under
//   AddressSanitizer the real malloc is ASan's, so this works in sanitizer builds as well.
//   Calls made inside shared libraries (libgomp, libstdc++) are not redirected; the library
//   under test is header-only, so all of its calls are. Linked without the wrap options, the
//   test fails to link (undefined __real_malloc) rather than silently counting less.
// `malloc_is_counted()` checks at run time that a malloc call is seen.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long long> g_allocations{0};
// Called through a volatile pointer: once GCC inlines the replaced operator delete it
// sees free() on memory from operator new and warns (-Wmismatched-new-delete), though
// the pair is consistent here.
void (*volatile g_free)(void*) = std::free;
}  // namespace

extern "C" {
void* __real_malloc(std::size_t size);
void* __real_calloc(std::size_t count, std::size_t size);
void* __real_realloc(void* p, std::size_t size);
void* __real_aligned_alloc(std::size_t alignment, std::size_t size);
int __real_posix_memalign(void** p, std::size_t alignment, std::size_t size);
void* __real_memalign(std::size_t alignment, std::size_t size);

void* __wrap_malloc(std::size_t size) {
  ++g_allocations;
  return __real_malloc(size);
}
void* __wrap_calloc(std::size_t count, std::size_t size) {
  ++g_allocations;
  return __real_calloc(count, size);
}
// Any realloc may move the block (and realloc(nullptr, n) is a malloc): counted every time.
void* __wrap_realloc(void* p, std::size_t size) {
  ++g_allocations;
  return __real_realloc(p, size);
}
void* __wrap_aligned_alloc(std::size_t alignment, std::size_t size) {
  ++g_allocations;
  return __real_aligned_alloc(alignment, size);
}
int __wrap_posix_memalign(void** p, std::size_t alignment, std::size_t size) {
  ++g_allocations;
  return __real_posix_memalign(p, alignment, size);
}
void* __wrap_memalign(std::size_t alignment, std::size_t size) {
  ++g_allocations;
  return __real_memalign(alignment, size);
}
}

namespace {
// Every form of operator new is replaced so that all of them pair with free(), also under
// sanitizers that intercept the library defaults. They count once and call the real allocator
// directly (not the wrapped one, which would count again).
void* CountedMalloc(std::size_t size) noexcept {
  ++g_allocations;
  return __real_malloc(size == 0 ? 1 : size);
}
void* CountedNew(std::size_t size) {
  if (void* p = CountedMalloc(size)) return p;
  throw std::bad_alloc();
}
void* CountedAligned(std::size_t size, std::align_val_t alignment) noexcept {
  ++g_allocations;
  const auto a = static_cast<std::size_t>(alignment);
  // aligned_alloc wants a size that is a multiple of the alignment.
  return __real_aligned_alloc(a, (size == 0 ? a : (size + a - 1) / a * a));
}
void* CountedAlignedNew(std::size_t size, std::align_val_t alignment) {
  if (void* p = CountedAligned(size, alignment)) return p;
  throw std::bad_alloc();
}

/// True when a malloc call in this executable is counted (the wrap options are in effect).
/// The pointer escapes through a volatile, so the compiler cannot drop the malloc/free pair.
[[maybe_unused]] bool malloc_is_counted() {
  void* volatile sink = nullptr;
  const long long before = g_allocations.load();
  sink = std::malloc(64);
  const bool counted = g_allocations.load() > before;
  std::free(sink);
  return counted;
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
void* operator new(std::size_t size, std::align_val_t alignment) {
  return CountedAlignedNew(size, alignment);
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return CountedAlignedNew(size, alignment);
}
void* operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return CountedAligned(size, alignment);
}
void* operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return CountedAligned(size, alignment);
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
void operator delete(void* p, std::align_val_t) noexcept {
  g_free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  g_free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  g_free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  g_free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  g_free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  g_free(p);
}
