// AVX2 + F16C conversion kernels (compiled with -mavx2 -mf16c -mfma -mbmi2). Same results as
// codecs/half.hpp bit for bit, NaN payloads included; tests/unit/test_codecs_convert.cpp checks.
#include <immintrin.h>

#include "codecs/isa_kernels.hpp"
#include "codecs/x86/stores.hpp"

namespace ctstream::codecs::avx2 {
namespace {

inline __m256i round_f32_to_bf16_lanes(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i q = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
  return _mm256_srli_epi32(_mm256_blendv_epi8(r, q, nan), 16);
}
// 16 rounded lanes (two registers of u32 < 65536) -> 16 u16 in order.
inline __m256i pack16(__m256i a, __m256i b) { return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8); }

}  // namespace

template <bool NT>
void f32_to_bf16_run(const void* in, void* out, size_t n) noexcept {
  const float* s = static_cast<const float*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = round_f32_to_bf16_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    __m256i b = round_f32_to_bf16_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8)));
    x86::put256<NT>(d + i, pack16(a, b));
  }
  scalar::f32_to_bf16(s + i, d + i, n - i, false);
}

template <bool NT>
void f32_to_f16_run(const void* in, void* out, size_t n) noexcept {
  const float* s = static_cast<const float*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    x86::put128<NT>(d + i, _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  scalar::f32_to_f16(s + i, d + i, n - i, false);
}

template <bool NT>
void bf16_to_f32_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint32_t* d = static_cast<uint32_t*>(out);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    x86::put256<NT>(d + i, _mm256_slli_epi32(w, 16));
  }
  scalar::bf16_to_f32(s + i, d + i, n - i, false);
}

template <bool NT>
void f16_to_f32_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  float* d = static_cast<float*>(out);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    x86::put256<NT>(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  scalar::f16_to_f32(s + i, d + i, n - i, false);
}

template <bool NT>
void bf16_to_f16_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))), 16);
    x86::put128<NT>(d + i, _mm256_cvtps_ph(_mm256_castsi256_ps(w), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  scalar::bf16_to_f16(s + i, d + i, n - i, false);
}

template <bool NT>
void f16_to_bf16_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = round_f32_to_bf16_lanes(
        _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)))));
    __m256i b = round_f32_to_bf16_lanes(
        _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 8)))));
    x86::put256<NT>(d + i, pack16(a, b));
  }
  scalar::f16_to_bf16(s + i, d + i, n - i, false);
}

// stream: non-temporal stores where aligned (codecs/x86/stores.hpp), the tail plain.
void f32_to_bf16(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? f32_to_bf16_run<true>(in, out, n) : f32_to_bf16_run<false>(in, out, n);
}
void f32_to_f16(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? f32_to_f16_run<true>(in, out, n) : f32_to_f16_run<false>(in, out, n);
}
void bf16_to_f32(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? bf16_to_f32_run<true>(in, out, n) : bf16_to_f32_run<false>(in, out, n);
}
void f16_to_f32(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? f16_to_f32_run<true>(in, out, n) : f16_to_f32_run<false>(in, out, n);
}
void bf16_to_f16(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? bf16_to_f16_run<true>(in, out, n) : bf16_to_f16_run<false>(in, out, n);
}
// Plain stores even where asked to stream: this kernel computes at about memory's rate here, and
// streamed it measured 8 % slower (the others 17-23 % faster; bench/RESULTS.md).
void f16_to_bf16(const void* in, void* out, size_t n, bool) noexcept { f16_to_bf16_run<false>(in, out, n); }
}  // namespace ctstream::codecs::avx2
