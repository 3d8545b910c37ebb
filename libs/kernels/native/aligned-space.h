// Float storage on 64-byte (cache-line) boundaries: std::vector's default allocator gives 16.
// Included by kernel-support.h, and by bench/learner/gemm/harness.cc, which runs gemm-kernels.h alone.
#pragma once
#include <cstdlib>
#include <new>
#include <vector>

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);  // the size must be a multiple of the alignment
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const CacheLineAllocator<U>&) const { return false; }
};
using AlignedFloats = std::vector<float, CacheLineAllocator<float>>;
