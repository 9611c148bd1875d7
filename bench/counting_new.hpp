// SPDX-License-Identifier: BSL-1.0
#pragma once
// Counts heap allocations while `bench::counting` is set, by replacing the global operator new and
// delete (the benches' noise-free cost figures). Replacement functions cannot be inline: include
// this header in exactly one translation unit of a benchmark binary.

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace bench {
inline std::atomic<unsigned long> allocations{0};
inline std::atomic<bool> counting{false};
}  // namespace bench

void* operator new(std::size_t size) {
  if (bench::counting.load(std::memory_order_relaxed)) bench::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, std::align_val_t align) {
  if (bench::counting.load(std::memory_order_relaxed)) bench::allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) & ~(a - 1))) return p;
  throw std::bad_alloc();
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
