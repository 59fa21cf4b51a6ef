// Output stores shared by the x86 ISA files (codecs_*.cpp, convert_*.cpp; put512 in the AVX-512 ones). NT
// (DequantSpec::stream): non-temporal -- the line goes to memory without being read for ownership
// first, which raises the write bandwidth of a large output by about half on the CPUs measured
// (bench/RESULTS.md) -- where the address is 16-byte aligned, in the widest aligned pieces: the
// kernels write each row front to back, so the pieces of consecutive vectors fill every line in the
// core's write-combining buffer before it leaves (an output 16 bytes past a line, where glibc's
// malloc and std::vector put large buffers, streams too). Elsewhere, and into stack scratch, plain
// unaligned stores. Kernels do not fence: their caller calls store_fence() after its last row
// (codecs/dequant.hpp).
//
// Internal linkage (an unnamed namespace): each ISA file compiles its own copy with its own flags,
// so no copy built with wider instructions can be merged into another file's calls.
#pragma once
#include <immintrin.h>
#include <stdint.h>

namespace ctstream::codecs::x86 {
namespace {

template <bool NT>
[[gnu::always_inline]] inline void put128(void* p, __m128i v) {
  if constexpr (NT)
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) return _mm_stream_si128(static_cast<__m128i*>(p), v);
  _mm_storeu_si128(static_cast<__m128i*>(p), v);
}
template <bool NT>
[[gnu::always_inline]] inline void put256(void* p, __m256i v) {
  if constexpr (NT) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if ((a & 31) == 0) return _mm256_stream_si256(static_cast<__m256i*>(p), v);
    if ((a & 15) == 0) {
      _mm_stream_si128(static_cast<__m128i*>(p), _mm256_castsi256_si128(v));
      return _mm_stream_si128(static_cast<__m128i*>(p) + 1, _mm256_extracti128_si256(v, 1));
    }
  }
  _mm256_storeu_si256(static_cast<__m256i*>(p), v);
}
template <bool NT>
[[gnu::always_inline]] inline void put256(void* p, __m256 v) {
  put256<NT>(p, _mm256_castps_si256(v));
}
#if defined(__AVX512F__)
// A whole 512-bit vector, as put256 stores: one non-temporal store on a line, else two halves.
template <bool NT>
[[gnu::always_inline]] inline void put512(void* p, __m512i v) {
  if constexpr (NT) {
    if ((reinterpret_cast<uintptr_t>(p) & 63) == 0) return _mm512_stream_si512(static_cast<__m512i*>(p), v);
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
      put256<NT>(p, _mm512_castsi512_si256(v));
      return put256<NT>(static_cast<__m256i*>(p) + 1, _mm512_extracti64x4_epi64(v, 1));
    }
  }
  _mm512_storeu_si512(p, v);
}
template <bool NT>
[[gnu::always_inline]] inline void put512(float* p, __m512 v) {
  put512<NT>(static_cast<void*>(p), _mm512_castps_si512(v));
}
#endif

}  // namespace
}  // namespace ctstream::codecs::x86
